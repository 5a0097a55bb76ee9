"""rms_norm: `weight * x / rms(x)`, optionally fused with the residual add before it; one row per program.

Rounding follows Hugging Face's LlamaRMSNorm: the residual sum is rounded to the input dtype, the
statistics are fp32, the normalized row is rounded to the input dtype before the weight multiplies it.
"""
from __future__ import annotations

import torch

from .triton_support import check_launchable, jit, next_power_of_2, tl


@jit
def _rms_norm_kernel(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
    stride_x, stride_residual, stride_out, stride_residual_out,
    hidden, eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_residual + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)  # the sum, rounded like torch's add
        tl.store(residual_out_ptr + row * stride_residual_out + cols, x, mask=mask)
    h = x.to(tl.float32)
    variance = tl.sum(h * h, axis=0) / hidden
    normed = (h * tl.rsqrt(variance + eps)).to(x.dtype)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    out = normed.to(tl.float32) * w.to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None, residual_out: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """x `[..., hidden]`, weight `[hidden]`. Without residual: the normed x. With residual: h = x + residual
    and returns `(normed h, h)`. Results go to fresh tensors, or to contiguous `out` / `residual_out`."""
    tensors = (x, weight) if residual is None else (x, weight, residual)
    check_launchable(*tensors)
    hidden = x.shape[-1]
    assert weight.shape == (hidden,) and weight.dtype == x.dtype, (weight.shape, weight.dtype, x.dtype)
    assert x.stride(-1) == 1 and weight.stride(0) == 1
    x2 = x.reshape(-1, hidden)  # [num_rows, hidden]
    num_rows = x2.shape[0]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out  # [..., hidden]
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    if residual is not None:
        assert residual.shape == x.shape and residual.dtype == x.dtype, (residual.shape, residual.dtype)
        r2 = residual.reshape(-1, hidden)  # [num_rows, hidden]
        assert r2.stride(-1) == 1
        if residual_out is None:
            residual_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # [..., hidden]
        assert residual_out.shape == x.shape and residual_out.dtype == x.dtype and residual_out.is_contiguous()
    else:
        r2, residual_out = x2, out  # unused by the kernel
    if num_rows > 0:
        _rms_norm_kernel[(num_rows,)](
            x2, r2, weight, out, residual_out,
            x2.stride(0), r2.stride(0), hidden, hidden,
            hidden, eps,
            HAS_RESIDUAL=residual is not None,
            BLOCK=next_power_of_2(hidden),
        )
    return out if residual is None else (out, residual_out)


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Plain torch, as Hugging Face's LlamaRMSNorm (with the residual add in front when given)."""
    h = x if residual is None else x + residual
    h32 = h.float()
    variance = h32.pow(2).mean(-1, keepdim=True)
    out = weight * (h32 * torch.rsqrt(variance + eps)).to(h.dtype)
    return out if residual is None else (out, h)
