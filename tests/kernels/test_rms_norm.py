"""rms_norm: Triton kernel vs torch reference (fused residual too); the reference vs torch's own rms_norm."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernel_testing import assert_rel_close, assert_same_rounding, tolerance
from llmchat.kernels.rms_norm import rms_norm, rms_norm_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _inputs(num_rows: int, hidden: int, dtype: torch.dtype, device: torch.device, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(num_rows, hidden, generator=gen) * 3).to(dtype).to(device)
    residual = torch.randn(num_rows, hidden, generator=gen).to(dtype).to(device)
    weight = (1 + 0.5 * torch.randn(hidden, generator=gen)).to(dtype).to(device)
    return x, residual, weight


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("hidden", [64, 576])  # 576: SmolLM2, not a power of 2
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_kernel_matches_reference(triton_device, dtype, hidden, with_residual):
    x, residual, weight = _inputs(7, hidden, dtype, triton_device, seed=hidden)
    out = torch.full_like(x, float("nan"))  # poisoned: an element the kernel misses stays NaN
    if not with_residual:
        rms_norm(x, weight, 1e-5, out=out)
        assert_rel_close(out, rms_norm_ref(x, weight, 1e-5), tolerance(dtype))
        return
    h = torch.full_like(x, float("nan"))
    rms_norm(x, weight, 1e-5, residual, out=out, residual_out=h)
    out_ref, h_ref = rms_norm_ref(x, weight, 1e-5, residual)
    assert_same_rounding(h, h_ref)  # the residual sum is rounded once, like torch's add
    assert_rel_close(out, out_ref, tolerance(dtype))


def test_rms_norm_kernel_keeps_leading_dims(triton_device):
    x, _, weight = _inputs(6, 64, torch.float32, triton_device, seed=3)
    x3 = x.view(2, 3, 64)
    assert_rel_close(rms_norm(x3, weight, 1e-6), rms_norm_ref(x, weight, 1e-6).view(2, 3, 64), 1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_rms_norm_reference_matches_torch_and_hf(dtype):
    x, residual, weight = _inputs(5, 576, dtype, torch.device("cpu"), seed=9)
    h = x + residual
    out, h_ref = rms_norm_ref(x, weight, 1e-5, residual)
    assert torch.equal(h_ref, h)
    # Hugging Face LlamaRMSNorm, written out: normalize in fp32, round, then multiply by the weight
    h32 = h.float()
    hf = weight * (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype)
    assert torch.equal(out, hf)
    # and torch's own rms_norm in fp32 agrees to rounding
    oracle = F.rms_norm(h.double(), (576,), weight.double(), eps=1e-5)
    assert_rel_close(out.double(), oracle, {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype])
