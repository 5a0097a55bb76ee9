"""y = x @ W.T for a weight kept in its GGUF block format (quant_blocks.QuantWeight), on the CPU.

Fast path (C++, csrc/quant_linear.cpp, loaded by quant_cpu_build): llama.cpp's scheme. Each activation row is
quantized to int8 per 32 values (d = max|x| / 127, q = round(x / d)); every 32-weight group is an integer dot
product of the quantized bytes with those int8 values, scaled in fp32. It reads only the quantized bytes, once
per call, for any number of rows. With AVX-512 VNNI, for Q4_0/Q4_1/Q5_x/Q5_K/Q8_0 and 16 rows or more, a tile
of 8 weight rows is unpacked once into L1 and every row runs against it, two weight rows per 512-bit vector
(csrc/quant_tiles_avx512.h); for Q4_K/Q6_K from 512 rows, a tile of 4 weight rows per chunk of rows that fits L2
(csrc/quant_ktiles_avx512.h); otherwise one weight row serves up to 4 rows at a time. All give the same bits.
For many rows (prefill) the weight is instead dequantized and multiplied with a oneDNN GEMM, from
`GEMM_MIN_ROWS` rows on: there the GEMM's arithmetic, not the weight bytes, sets the time. The GEMM is fp32 unless
LLMCHAT_QUANT_GEMM=bfloat16 and the CPU does bf16 dot products natively (AVX-512 BF16, AMX): then it runs on bf16
copies of the activations and the dequantized weight, accumulating in fp32, at twice the speed (a 512 x 2048 @
2048 x 8192 Q4_K linear, AMD EPYC, 2 threads: 88.7 -> 45.7 ms; a 1B model's 128-token prefill 1920 -> 1030 ms).
Not the default: its rounding is as coarse as the int8 activations of the few-rows path, so a prompt's KV
computed whole and the same KV computed in a short tail (after a prefix-cache hit) differ more, and a greedy
reply that reuses the cache diverges from one that does not sooner (the default model, `ask` twice with a
disk-tier hit: at the 5th token). `gemm_dtype()` says which.

Batch invariance: any GEMM path makes a row's result depend on how many rows came with it, so a greedy reply
after a cache hit (the prompt's tail computed alone, on the int8 path) may part from the reply without one
(the whole prompt on the GEMM path) after some tokens — in fp32 too (the default model on an Intel Xeon:
`ask` twice with a disk hit parted at the 18th token). LLMCHAT_QUANT_GEMM=off runs every row count on the
int8 dots, whose result for a row is the same bits whatever rows share its call: the cache then never changes
a greedy reply, at the int8 path's prefill speed (the default model's layers, `quant_bench`, Intel Xeon with
AVX-512 VNNI, 2 threads, int8 tiles / row by row / fp32 dequant-GEMM: 128 rows 117 / 248 / 120 ms, 512 rows
419 / 989 / 366 ms; its Q8_0 head at 512 rows 119 / 271 / 121 ms; on an AMD EPYC the tiles beat the GEMM at
every row count, 512 rows 482 / 791 / 568 ms). Not the default: a Q4_K_M layer at 256-512 rows is 11-17%
slower than the GEMM on the EPYC (Q4_K / Q6_K's int8 arithmetic per product is the same tiled or not: the
tiles only save activation reads), and AVX2 builds have no tiles. Below GEMM_MIN_ROWS (a prompt, or a chunk of
one, under 128 tokens) every mode is on the int8 dots: there the linears give the same bits with or without a
cache hit.

Numerics: the int8 activations are the one rounding beyond fp32 on the few-rows path (`quantize_activations_ref`
is that rounding in torch); where the GEMM path runs in bf16 it rounds activations, weights and its output to
bf16 (half a bf16 step, up to 2^-8 relative, each), else it is fp32 throughout. The reference,
`quant_linear_ref`, dequantizes and multiplies in fp32.
"""
from __future__ import annotations

import functools
import os
from types import ModuleType

import torch
from torch.nn import functional as F

from .linear import cpu_has_native_bf16, onednn_linear_available
from .quant_blocks import QuantWeight, dequantize_blocks_ref, dequantize_ref

# From this many rows on, dequantize + fp32 GEMM takes over from the integer dots. kernels/quant_bench.py, AMD EPYC
# with AVX-512 VNNI, 2 threads, ms, the int8 dots (tiled where faster) / dequant + fp32 GEMM:
#   the default model's 210 projections (Q4_1): 64 rows 65.3 / 92.9, 128 rows 133.7 / 167.2, 512 rows 482 / 568;
#   one Llama-3.2-1B-shape Q4_K_M layer (--synthetic llama-1b-q4km): 64 rows 41.5 / 58.1, 128 rows 81.5 / 90.9,
#   256 rows 177.6 / 159.9, 512 rows 386.6 / 329.8.
# Up to 128 rows the int8 dots are faster on both (an Intel Xeon's figures for the default model: 128 rows
# level); past ~200 rows the GEMM wins for Q4_K_M (by 11-17%: too much to make LLMCHAT_QUANT_GEMM=off the default).
GEMM_MIN_ROWS = 128
GEMM_TILE_ELEMENTS = 1 << 22  # the many-rows path dequantizes at most this many weights (16 MB fp32) at a time


@functools.cache
def qtype_number(qtype: str) -> int:
    """ggml's number for a block type name (the C++ kernels switch on it)."""
    from gguf import GGMLQuantizationType

    return int(GGMLQuantizationType[qtype])


def quant_linear(x: torch.Tensor, weight: QuantWeight, cpu_kernels: ModuleType | None,
                 scratch: torch.Tensor | None = None) -> torch.Tensor:
    """x `[num_rows, in_features]` -> `[num_rows, out_features]` in x's dtype. `cpu_kernels` is the module from
    quant_cpu_build.load_cpu_kernels (None: the torch path, which dequantizes the weight on every call).
    `scratch`, a contiguous fp32 buffer, holds the dequantized weight on the many-rows path, as many rows at a
    time as fit (the caller keeps one for all its linears, sized by `scratch_elements`; without it each call
    allocates one)."""
    if cpu_kernels is None or x.device.type != "cpu":
        return quant_linear_ref(x, weight)
    qtype = qtype_number(weight.qtype)
    xf = x.float()
    if x.shape[0] >= GEMM_MIN_ROWS and gemm_dtype() is not None:
        y = _dequantize_gemm(xf, weight, qtype, cpu_kernels, scratch)
    else:
        y = cpu_kernels.quant_linear(xf, weight.data, qtype, weight.out_features, weight.in_features)
    return y.to(x.dtype)


GEMM_MODES = ("float32", "bfloat16", "off")  # LLMCHAT_QUANT_GEMM's values; unset is float32


@functools.cache
def gemm_dtype() -> torch.dtype | None:
    """The dtype the many-rows path multiplies in: bf16 where LLMCHAT_QUANT_GEMM is "bfloat16" and the CPU has
    native bf16 dot products, None where it is "off" (every row count on the int8 dots: batch-invariant), else
    fp32. Any other value is a ValueError that names the choices."""
    mode = os.environ.get("LLMCHAT_QUANT_GEMM", "").strip().lower() or "float32"
    if mode not in GEMM_MODES:
        raise ValueError(f"LLMCHAT_QUANT_GEMM={mode!r}: use one of {', '.join(GEMM_MODES)}")
    if mode == "off":
        return None
    return torch.bfloat16 if mode == "bfloat16" and cpu_has_native_bf16() else torch.float32


def _dequantize_gemm(x: torch.Tensor, weight: QuantWeight, qtype: int, cpu_kernels: ModuleType,
                     scratch: torch.Tensor | None) -> torch.Tensor:
    """x @ W.T with W dequantized into `scratch` a tile of rows at a time (at most GEMM_TILE_ELEMENTS), in
    gemm_dtype(): for bf16 the scratch's first two thirds take the fp32 tile, its last third the bf16 copy."""
    n, k = weight.out_features, weight.in_features
    dtype = gemm_dtype()
    share = 2 / 3 if dtype != torch.float32 else 1.0  # of the scratch that holds the fp32 tile
    if scratch is None or int(scratch.numel() * share) < k:
        scratch = torch.empty(int(min(n * k, GEMM_TILE_ELEMENTS) / share) + 2)
    fp32_part = int(scratch.numel() * share)
    tile_rows = max(1, min(n, fp32_part // k))
    low = scratch[fp32_part:].view(dtype) if dtype != torch.float32 else None  # 2 bf16 per fp32 element
    xg = x.to(dtype)

    def tile(n0: int, n1: int) -> torch.Tensor:
        w = cpu_kernels.dequantize(weight.data[n0:n1], qtype, n1 - n0, k, None, scratch[:fp32_part])
        return w if low is None else low[: (n1 - n0) * k].view(n1 - n0, k).copy_(w)

    if tile_rows == n:
        return gemm(xg, tile(0, n)).float()
    y = torch.empty(x.shape[0], n)  # [num_rows, out_features]
    for n0 in range(0, n, tile_rows):
        n1 = min(n, n0 + tile_rows)
        y[:, n0:n1] = gemm(xg, tile(n0, n1))
    return y


def scratch_elements(weights: list[QuantWeight]) -> int:
    """The scratch size that lets the many-rows path dequantize any of `weights` whole, up to the tile cap (and
    hold its bf16 copy where the GEMM runs in bf16)."""
    most = max([min(w.out_features * w.in_features, GEMM_TILE_ELEMENTS) for w in weights] + [0])
    if gemm_dtype() is None:  # no many-rows GEMM, no tile to hold
        return 0
    return most + (most + 1) // 2 + 2 if gemm_dtype() == torch.bfloat16 else most


def gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T (both fp32, or both bf16) for many rows: oneDNN on the plain weight where torch has it (on an
    AVX-512 EPYC, 2 threads, fp32: within 5% of its prepacked weight and ~20% faster than `F.linear`'s sgemm at
    64-256 rows)."""
    if onednn_linear_available():
        return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
    return F.linear(x, w)


def dequantize_rows(weight: QuantWeight, row_ids: torch.Tensor, cpu_kernels: ModuleType | None) -> torch.Tensor:
    """Rows `row_ids` of the weight as fp32 `[num_ids, in_features]` (an embedding lookup)."""
    if cpu_kernels is None or weight.data.device.type != "cpu":
        return dequantize_blocks_ref(weight.qtype, weight.data[row_ids.long()])
    return cpu_kernels.dequantize(weight.data, qtype_number(weight.qtype), weight.out_features,
                                  weight.in_features, row_ids)


def quantize_activations_ref(x: torch.Tensor) -> torch.Tensor:
    """x fp32 `[num_rows, in_features]` rounded the way the fast path sees it: int8 per 32-block, scale
    max|x| / 127, returned dequantized (fp32, same shape)."""
    blocks = x.float().reshape(x.shape[0], -1, 32)
    scale = blocks.abs().amax(dim=-1, keepdim=True) / 127.0
    inv = torch.where(scale != 0, 1.0 / scale, torch.zeros_like(scale))
    return (torch.round(blocks * inv) * scale).reshape(x.shape)


def quant_linear_ref(x: torch.Tensor, weight: QuantWeight) -> torch.Tensor:
    """The plain reference: dequantize the weight, then `F.linear` in fp32; returns x's dtype."""
    return F.linear(x.float(), dequantize_ref(weight).to(x.device)).to(x.dtype)
