"""quant_gemm: y = x @ W.T for many rows (prefill) and a weight kept in its GGUF block format
(quant_blocks.QuantWeight), on CUDA. Each program owns a [BLOCK_M, BLOCK_N] tile of the output; for each
BLOCK_K step it dequantizes the weight tile in registers (quant_tile.py), rounds it to the activations' dtype and
accumulates `tl.dot` in fp32 (tensor cores for fp16/bf16; IEEE fp32 for fp32 activations). No dequantized copy
of the weight is ever written to memory.

Numerics: the one rounding beyond the reference is the weight's to the activation dtype (none for fp32): half
an ulp of bf16 (2^-9 relative) or fp16 (2^-12) per weight. `quant_gemm_ref` does exactly that rounding, then
multiplies in fp32.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from .quant_blocks import BLOCK_LAYOUTS, QuantWeight, dequantize_ref
from .quant_tile import TRITON_QTYPES, _dequant_tile
from .triton_support import cdiv, check_launchable, jit, tl, upcast_dot

_DOT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@jit
def _quant_gemm_kernel(
    x_ptr, w_ptr, out_ptr,
    num_rows, n_out, k, row_bytes, stride_x, stride_out,
    QTYPE: tl.constexpr,
    BLOCK_BYTES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,  # the dtype both dot operands take: the activations', fp32 under the interpreter's bf16
    ROUND_DTYPE: tl.constexpr,  # the dtype the weight is rounded to first (the activations')
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = m < num_rows
    n_mask = n < n_out
    rows = n.to(tl.int64)[:, None]  # [BLOCK_N, 1]
    x_rows = m.to(tl.int64)[:, None] * stride_x  # [BLOCK_M, 1]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        k_mask = cols < k
        w = _dequant_tile(w_ptr, rows, cols[None, :], row_bytes, n_mask[:, None] & k_mask[None, :],
                          QTYPE, BLOCK_BYTES)  # [BLOCK_N, BLOCK_K] fp32
        w_op = w.to(ROUND_DTYPE).to(DOT_DTYPE)
        x = tl.load(x_ptr + x_rows + cols[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        x_op = x.to(DOT_DTYPE)  # [BLOCK_M, BLOCK_K]
        acc = tl.dot(x_op, tl.trans(w_op), acc, input_precision="ieee")
    tl.store(out_ptr + m.to(tl.int64)[:, None] * stride_out + n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=m_mask[:, None] & n_mask[None, :])


def quant_gemm(x: torch.Tensor, weight: QuantWeight) -> torch.Tensor:
    """x `[num_rows, in_features]` (fp32, fp16 or bf16) -> `[num_rows, out_features]` in x's dtype. weight.data
    must be on x's device."""
    check_launchable(x, weight.data)
    assert weight.qtype in TRITON_QTYPES, f"no Triton kernel for {weight.qtype}"
    assert x.dim() == 2 and x.shape[1] == weight.in_features and x.dtype in _DOT_DTYPES, (x.shape, x.dtype)
    assert x.stride(1) == 1 and weight.data.is_contiguous()
    num_rows, n_out = x.shape[0], weight.out_features
    out = torch.empty(num_rows, n_out, dtype=x.dtype, device=x.device)  # [num_rows, out_features]
    if num_rows == 0 or n_out == 0:
        return out
    round_dtype = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[x.dtype]
    dot_dtype = tl.float32 if upcast_dot(x.dtype) else round_dtype
    block_m, block_n, block_k = 32, 64, 32
    _quant_gemm_kernel[(cdiv(num_rows, block_m), cdiv(n_out, block_n))](
        x, weight.data, out,
        num_rows, n_out, weight.in_features, weight.data.shape[1], x.stride(0), out.stride(0),
        QTYPE=TRITON_QTYPES[weight.qtype], BLOCK_BYTES=BLOCK_LAYOUTS[weight.qtype][1],
        DOT_DTYPE=dot_dtype, ROUND_DTYPE=round_dtype, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
    )
    return out


def quant_gemm_ref(x: torch.Tensor, weight: QuantWeight) -> torch.Tensor:
    """Dequantize the weight, round it to x's dtype (the kernel's one extra rounding), `F.linear` in fp32."""
    w = dequantize_ref(weight).to(x.device).to(x.dtype).float()
    return F.linear(x.float(), w).to(x.dtype)
