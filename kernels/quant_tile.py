"""The step both quantized Triton kernels share (quant_gemv.py, quant_gemm.py): a tile of a GGUF-quantized weight,
read as the file stores it (uint8 `[out_features, row_bytes]`, layouts in quant_blocks.py) and dequantized to
fp32 in registers. A device function, called from kernels; `QTYPE` is ggml's type number (a constexpr, so each
kernel specialization holds one type's code only).

Every weight reads its own bytes (its quant byte, its block's fp16 scale fields): the repeated reads of one
block's header hit the cache, and the only bytes fetched from memory are the quantized ones.
"""
from __future__ import annotations

from .triton_support import jit, tl

# ggml's numbers of the block types the Triton kernels compute
TRITON_QTYPES: dict[str, int] = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11,
                                 "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}


@jit
def _u8(ptr, offs, mask):
    return tl.load(ptr + offs, mask=mask, other=0).to(tl.int32)


@jit
def _f16(ptr, offs, mask):
    lo = tl.load(ptr + offs, mask=mask, other=0).to(tl.uint16)
    hi = tl.load(ptr + offs + 1, mask=mask, other=0).to(tl.uint16)
    return (lo | (hi << 8)).to(tl.float16, bitcast=True).to(tl.float32)


@jit
def _dequant_tile(
    w_ptr, rows, cols, row_bytes, mask,  # rows [BLOCK_N, 1] int64, cols [1, BLOCK_K] int32, mask [BLOCK_N, BLOCK_K]
    QTYPE: tl.constexpr,
    BLOCK_BYTES: tl.constexpr,  # bytes per block of QTYPE
):
    """fp32 [BLOCK_N, BLOCK_K]: weight (rows, cols); 0 where mask is False."""
    if QTYPE == 8:  # Q8_0
        p = rows * row_bytes + (cols // 32) * 34
        q = tl.load(w_ptr + p + 2 + cols % 32, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        w = _f16(w_ptr, p, mask) * q
    elif QTYPE == 2 or QTYPE == 3:  # Q4_0, Q4_1
        j = cols % 32
        p = rows * row_bytes + (cols // 32) * BLOCK_BYTES
        qs = BLOCK_BYTES - 16
        nib = ((_u8(w_ptr, p + qs + j % 16, mask) >> (4 * (j // 16))) & 15).to(tl.float32)
        if QTYPE == 2:
            w = _f16(w_ptr, p, mask) * (nib - 8.0)
        else:
            w = _f16(w_ptr, p, mask) * nib + _f16(w_ptr, p + 2, mask)
    elif QTYPE == 6 or QTYPE == 7:  # Q5_0, Q5_1
        j = cols % 32
        p = rows * row_bytes + (cols // 32) * BLOCK_BYTES
        qh = BLOCK_BYTES - 20
        nib = (_u8(w_ptr, p + qh + 4 + j % 16, mask) >> (4 * (j // 16))) & 15
        high = (_u8(w_ptr, p + qh + j // 8, mask) >> (j % 8)) & 1
        q = (nib | (high << 4)).to(tl.float32)
        if QTYPE == 6:
            w = _f16(w_ptr, p, mask) * (q - 16.0)
        else:
            w = _f16(w_ptr, p, mask) * q + _f16(w_ptr, p + 2, mask)
    elif QTYPE == 12 or QTYPE == 13:  # Q4_K, Q5_K: eight sub-blocks of 32 with 6-bit scales and mins
        j = cols % 256
        s = j // 32
        l = j % 32
        p = rows * row_bytes + (cols // 256) * BLOCK_BYTES
        a = _u8(w_ptr, p + 4 + s % 4, mask)
        b = _u8(w_ptr, p + 8 + s % 4, mask)
        c = _u8(w_ptr, p + 12 + s % 4, mask)
        sc = tl.where(s < 4, a & 63, (c & 15) | ((a >> 6) << 4)).to(tl.float32)
        mn = tl.where(s < 4, b & 63, (c >> 4) | ((b >> 6) << 4)).to(tl.float32)
        qs = BLOCK_BYTES - 128
        q = (_u8(w_ptr, p + qs + 32 * (s // 2) + l, mask) >> (4 * (s % 2))) & 15
        if QTYPE == 13:
            q = q | (((_u8(w_ptr, p + 16 + l, mask) >> s) & 1) << 4)
        w = _f16(w_ptr, p, mask) * sc * q.to(tl.float32) - _f16(w_ptr, p + 2, mask) * mn
    elif QTYPE == 14:  # Q6_K: ql[128], qh[64], int8 scales[16], d
        j = cols % 256
        h = j // 128
        g = (j % 128) // 32
        l = j % 32
        p = rows * row_bytes + (cols // 256) * 210
        low = (_u8(w_ptr, p + 64 * h + 32 * (g % 2) + l, mask) >> (4 * (g // 2))) & 15
        high = (_u8(w_ptr, p + 128 + 32 * h + l, mask) >> (2 * g)) & 3
        q = ((low | (high << 4)) - 32).to(tl.float32)
        sc = tl.load(w_ptr + p + 192 + j // 16, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        w = _f16(w_ptr, p + 208, mask) * sc * q
    elif QTYPE == 10:  # Q2_K: scales[16] (scale | min << 4), qs[64], d, dmin
        j = cols % 256
        g = j // 32
        p = rows * row_bytes + (cols // 256) * 84
        q = ((_u8(w_ptr, p + 16 + 32 * (g // 4) + j % 32, mask) >> (2 * (g % 4))) & 3).to(tl.float32)
        sm = _u8(w_ptr, p + j // 16, mask)
        w = _f16(w_ptr, p + 80, mask) * (sm & 15).to(tl.float32) * q - _f16(w_ptr, p + 82, mask) * (sm >> 4).to(
            tl.float32)
    else:  # Q3_K: hmask[32], qs[64], scales[12] (sixteen 6-bit), d
        tl.static_assert(QTYPE == 11, "unsupported block type")
        j = cols % 256
        g = j // 32
        l = j % 32
        s = j // 16
        p = rows * row_bytes + (cols // 256) * 110
        crumb = (_u8(w_ptr, p + 32 + 32 * (g // 4) + l, mask) >> (2 * (g % 4))) & 3
        hbit = (_u8(w_ptr, p + l, mask) >> g) & 1
        q = (crumb - 4 * (1 - hbit)).to(tl.float32)
        low = (_u8(w_ptr, p + 96 + s % 8, mask) >> (4 * (s // 8))) & 15
        high = (_u8(w_ptr, p + 104 + s % 4, mask) >> (2 * (s // 4))) & 3
        sc = ((low | (high << 4)) - 32).to(tl.float32)
        w = _f16(w_ptr, p + 108, mask) * sc * q
    return tl.where(mask, w, 0.0)
