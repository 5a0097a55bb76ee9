"""Triton, imported once and guarded, plus the small helpers every kernel wrapper needs.

Importing this module never fails: where `triton` is missing (macOS, Windows) `HAS_TRITON` is
False, `jit` returns a stand-in that raises a clear error when launched, and the torch references
still work. Kernel files say `from __future__ import annotations`, so `tl.constexpr` in a kernel's
signature is never evaluated at import time.

Triton runs on CPU tensors only through its interpreter, and the interpreter must be chosen before
`triton` is first imported (its standard library is decorated at import time). On a machine without
CUDA, compiled Triton cannot run at all, so there we default `TRITON_INTERPRET=1` before importing
it; an explicit `TRITON_INTERPRET=0` in the environment is respected.
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

import torch

if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # the torch references remain usable
    triton = None
    tl = None
    HAS_TRITON = False


class _MissingTriton:
    """Stands in for a kernel where the `triton` package is not installed."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        raise RuntimeError(
            f"{self.fn.__name__} needs the `triton` package, which is not installed here; "
            "use backend='torch' (or LLMCHAT_KERNEL_BACKEND=torch)"
        )


def jit(fn: Callable[..., Any]) -> Any:
    """`triton.jit` where Triton is installed, else a stand-in that explains what is missing."""
    return triton.jit(fn) if HAS_TRITON else _MissingTriton(fn)


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1 at import)."""
    return HAS_TRITON and bool(triton.knobs.runtime.interpret)


def check_launchable(*tensors: torch.Tensor) -> None:
    """Raise with a remedy unless Triton can run on these tensors (one device; CPU needs the interpreter)."""
    devices = {t.device for t in tensors}
    assert len(devices) == 1, f"all tensors must be on one device, got {devices}"
    if not HAS_TRITON:
        raise RuntimeError("the Triton backend needs the `triton` package; use backend='torch'")
    device = devices.pop()
    if device.type == "cpu" and not interpreting():
        raise RuntimeError(
            "Triton kernels run on CPU tensors only under its interpreter: set TRITON_INTERPRET=1 "
            "before `triton` is first imported, or use backend='torch'"
        )
    if device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"the Triton backend supports CUDA (and CPU via the interpreter), not {device.type}")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors on `device`; a small stand-in on CPU (the interpreter runs programs serially)."""
    if device.type != "cuda":
        return 4
    return _num_sms(device.index if device.index is not None else torch.cuda.current_device())


def upcast_dot(dtype: torch.dtype) -> bool:
    """Whether `tl.dot` operands must be upcast to fp32: the interpreter multiplies raw bf16 bit patterns
    (triton-lang/triton#11584). bf16 values are exact in fp32 and so are their products, so the result
    equals a bf16 tensor-core dot with fp32 accumulation, up to summation order."""
    return interpreting() and dtype == torch.bfloat16
