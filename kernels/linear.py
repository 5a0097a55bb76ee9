"""y = x @ W.T + b on CPU: the plain fp32 path, the oneDNN-prepacked bf16 path, and the torch reference.

Measured on an AMX Xeon, 2 threads, the default model's 121 projections (30 layers + tied head):
  M=1: fp32 `F.linear` ~33 ms, fp32 prepacked ~40 ms, bf16 `F.linear` ~40 ms, bf16 prepacked ~30 ms
  M=4: fp32 `F.linear` ~61 ms, fp32 prepacked ~45 ms, bf16 `F.linear` ~40 ms, bf16 prepacked ~30 ms
(medians, other jobs on the machine). So: fp32 (the reference format) keeps its plain weight and runs
`F.linear`; bf16 keeps ONLY the prepacked weight (the plain copy is dropped: one copy in memory) and runs
oneDNN on CPUs with native bf16 dot products (AMX / AVX-512 BF16); anywhere else bf16 stays plain.

Activations stay in the model's dtype (fp32 on CPU): a bf16-weight linear casts its input row(s) to bf16,
oneDNN accumulates in fp32, and the result is cast back. Numerics therefore differ from fp32; the format is
gated on accuracy (tests/test_weight_format.py).
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch.nn import functional as F

BATCH_SIZE_HINT = 8  # oneDNN's reorder wants an expected M; any M works with the packed weight


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True where oneDNN runs bf16 matmuls natively (AMX-BF16 or AVX-512 BF16), read from /proc/cpuinfo."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return False
    names = set(flags.split())
    return bool(names & {"amx_bf16", "avx512_bf16"})


def can_prepack(weight: torch.Tensor) -> bool:
    """Whether `weight` gets the oneDNN path: CPU bf16 on a CPU with native bf16 dot products."""
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and cpu_has_native_bf16()


def prepack_linear_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight `[out_features, in_features]` reordered for oneDNN, or None where that path does not apply."""
    if not can_prepack(weight):
        return None
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), BATCH_SIZE_HINT)


def linear(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
           packed: torch.Tensor | None) -> torch.Tensor:
    """x `[num_rows, in_features]` -> `[num_rows, out_features]` in x's dtype. With `packed` (bf16, from
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
