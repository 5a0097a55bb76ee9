"""y = x @ W.T + b on CPU: the plain fp32 path, the oneDNN-prepacked bf16 path, and the torch reference.

Measured on an AMX Xeon, 2 threads, the default model's 121 projections (30 layers + tied head):
  M=1: fp32 `F.linear` ~33 ms, fp32 prepacked ~40 ms, bf16 `F.linear` ~40 ms, bf16 prepacked ~30 ms
  M=4: fp32 `F.linear` ~61 ms, fp32 prepacked ~45 ms, bf16 `F.linear` ~40 ms, bf16 prepacked ~30 ms
and on an AVX-512 AMD EPYC, 2 threads, the same 121 projections (medians of 9, interleaved):
  fp32 `F.linear`  M=1 24 ms, M=2 52 ms, M=3 75 ms, M=5 58 ms, M=9 71 ms
  fp32 prepacked   M=1 17 ms, M=2 17 ms, M=3 18 ms, M=5 18 ms, M=9 24 ms
(medians, other jobs on the machine). A few rows at once are what a batch of chats and a speculative verify
step feed, and there plain fp32 `F.linear` (small-M sgemm) costs up to 3x one row while the prepacked oneDNN
weight reads once and costs the same for 1 to 9 rows. So every CPU weight, fp32 and bf16, keeps ONLY its
prepacked copy (one copy in memory) where oneDNN is available; bf16 only on CPUs with native bf16 dot
products (AMX / AVX-512 BF16; anywhere else bf16 stays plain). LLMCHAT_FP32_LINEAR=plain keeps fp32 on
`F.linear` (to compare, or on a CPU where the one-row case measures slower prepacked). Both fp32 paths are
fp32 arithmetic; they differ only in summation order (checked against an fp64 reference in
tests/kernels/test_linear.py).

Activations stay in the model's dtype (fp32 on CPU): a bf16-weight linear casts its input row(s) to bf16,
oneDNN accumulates in fp32, and the result is cast back. Numerics therefore differ from fp32; the format is
gated on accuracy (tests/test_weight_format.py).
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
from torch.nn import functional as F

BATCH_SIZE_HINT = 8  # oneDNN's reorder wants an expected M; any M works with the packed weight


@functools.cache
def onednn_linear_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True where oneDNN runs bf16 matmuls natively (AMX-BF16 or AVX-512 BF16), read from /proc/cpuinfo."""
    if not onednn_linear_available():
        return False
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return False
    names = set(flags.split())
    return bool(names & {"amx_bf16", "avx512_bf16"})


def fp32_linear_path() -> str:
    """"packed" (oneDNN, the default where it exists) or "plain" (`F.linear`), from LLMCHAT_FP32_LINEAR."""
    choice = os.environ.get("LLMCHAT_FP32_LINEAR", "packed").strip().lower() or "packed"
    if choice not in ("packed", "plain"):
        raise ValueError(f"LLMCHAT_FP32_LINEAR={choice!r}: use 'packed' or 'plain'")
    return choice


def can_prepack(weight: torch.Tensor) -> bool:
    """Whether `weight` gets the oneDNN path: a CPU weight, fp32 (unless LLMCHAT_FP32_LINEAR=plain) or bf16
    on a CPU with native bf16 dot products, where this torch has oneDNN's linear."""
    if weight.device.type != "cpu" or not onednn_linear_available():
        return False
    if weight.dtype == torch.float32:
        return fp32_linear_path() == "packed"
    return weight.dtype == torch.bfloat16 and cpu_has_native_bf16()


def prepack_linear_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight `[out_features, in_features]` reordered for oneDNN, or None where that path does not apply."""
    if not can_prepack(weight):
        return None
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), BATCH_SIZE_HINT)


def linear(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
           packed: torch.Tensor | None) -> torch.Tensor:
    """x `[num_rows, in_features]` -> `[num_rows, out_features]` in x's dtype. With `packed` (fp32 or bf16, from
    prepack_linear_weight) `weight` may be None; otherwise `weight` is used, cast to x's dtype if it differs."""
    if packed is not None and x.shape[0] > 0:
        y = torch.ops.mkldnn._linear_pointwise(x.to(packed.dtype), packed, None, "none", [], "")
        y = y.to(x.dtype)
        return y if bias is None else y.add_(bias)
    assert weight is not None, "a linear whose plain weight was dropped needs its packed weight"
    if weight.dtype != x.dtype:  # bf16 weights where oneDNN has no native bf16 (slow; not chosen by default)
        y = F.linear(x.to(weight.dtype), weight).to(x.dtype)
        return y if bias is None else y.add_(bias)
    return F.linear(x, weight, bias)


def linear_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return x @ weight.T + (0 if bias is None else bias)
