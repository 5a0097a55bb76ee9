"""quant_gemv: y = x @ W.T for a few rows (decode: one token per sequence, 1-8 rows) and a weight kept in its GGUF
block format (quant_blocks.QuantWeight), on CUDA. Each program owns BLOCK_N output features: it walks the row
of blocks once, dequantizes a [BLOCK_N, BLOCK_K] tile in registers (quant_tile.py) and multiplies it with every
activation row at once, so the weight's quantized bytes are read once per call whatever the row count.

Numerics: the weight is dequantized to fp32 exactly as the reference does it; activations are upcast to fp32 and
the products summed in fp32, so the kernel equals dequantize-then-matmul up to fp32 summation order.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from .quant_blocks import BLOCK_LAYOUTS, QuantWeight, dequantize_ref
from .quant_tile import TRITON_QTYPES, _dequant_tile
from .triton_support import cdiv, check_launchable, jit, next_power_of_2, tl

GEMV_MAX_ROWS = 8  # more rows go to quant_gemm (tensor-core tiles)


@jit
def _quant_gemv_kernel(
    x_ptr, w_ptr, out_ptr,
    num_rows, n_out, k, row_bytes, stride_x, stride_out,
    QTYPE: tl.constexpr,
    BLOCK_BYTES: tl.constexpr,
    BLOCK_M: tl.constexpr,  # >= num_rows
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.arange(0, BLOCK_M)
    n_mask = n < n_out
    m_mask = m < num_rows
    rows = n.to(tl.int64)[:, None]  # [BLOCK_N, 1]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        k_mask = cols < k
        w = _dequant_tile(w_ptr, rows, cols[None, :], row_bytes, n_mask[:, None] & k_mask[None, :],
                          QTYPE, BLOCK_BYTES)  # [BLOCK_N, BLOCK_K] fp32
        x = tl.load(x_ptr + m[:, None] * stride_x + cols[None, :], mask=m_mask[:, None] & k_mask[None, :],
                    other=0.0).to(tl.float32)  # [BLOCK_M, BLOCK_K]
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
    tl.store(out_ptr + m[:, None] * stride_out + n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=m_mask[:, None] & n_mask[None, :])


def quant_gemv(x: torch.Tensor, weight: QuantWeight) -> torch.Tensor:
    """x `[num_rows, in_features]` (num_rows <= GEMV_MAX_ROWS; fp32, fp16 or bf16) -> `[num_rows, out_features]`
    in x's dtype. weight.data must be on x's device."""
    check_launchable(x, weight.data)
    assert weight.qtype in TRITON_QTYPES, f"no Triton kernel for {weight.qtype}"
    assert x.dim() == 2 and x.shape[1] == weight.in_features and x.shape[0] <= GEMV_MAX_ROWS, x.shape
    assert x.stride(1) == 1 and weight.data.is_contiguous()
    num_rows, n_out = x.shape[0], weight.out_features
    out = torch.empty(num_rows, n_out, dtype=x.dtype, device=x.device)  # [num_rows, out_features]
    if num_rows == 0 or n_out == 0:
        return out
    block_m = next_power_of_2(num_rows)
    block_n = 64 if block_m <= 2 else 32  # the [BLOCK_M, BLOCK_N, BLOCK_K] product stays within registers
    _quant_gemv_kernel[(cdiv(n_out, block_n),)](
        x, weight.data, out,
        num_rows, n_out, weight.in_features, weight.data.shape[1], x.stride(0), out.stride(0),
        QTYPE=TRITON_QTYPES[weight.qtype], BLOCK_BYTES=BLOCK_LAYOUTS[weight.qtype][1],
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=32,
    )
    return out


def quant_gemv_ref(x: torch.Tensor, weight: QuantWeight) -> torch.Tensor:
    """Dequantize the weight, then `F.linear` in fp32; returns x's dtype."""
    return F.linear(x.float(), dequantize_ref(weight).to(x.device)).to(x.dtype)
