"""Will a model fit: the memory it needs (its weights as the engine will hold them + the KV cache budget) against
the memory available now. Estimates from the header (parameter count) and the file's size; nothing is loaded.
"""
from __future__ import annotations

import os

from .inventory import ModelEntry

BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


def bytes_per_param(weight_format: str | None, dtype: str | None, device: str, gguf: bool) -> float | None:
    """How many bytes per parameter the weights take once loaded; None: as stored in the file (quantized).
    The same choice as core/model/loader.resolve_weight_dtype: 'auto' keeps a GGUF's own blocks on the CPU with
    fp32 activations, else it is the activation dtype."""
    choice = weight_format or "auto"
    if choice == "auto":
        activations = dtype or ("float32" if device == "cpu" else "bfloat16")
        choice = "gguf" if gguf and device == "cpu" and activations == "float32" else activations
    return BYTES_PER_PARAM.get(choice)


def weight_bytes(entry: ModelEntry, per_param: float | None) -> int | None:
    if per_param is None or entry.num_params is None:
        return entry.size_bytes if per_param is None else None
    return int(entry.num_params * per_param)


def memory_needed(entry: ModelEntry, per_param: float | None, kv_cache_bytes: int) -> int | None:
    weights = weight_bytes(entry, per_param)
    return None if weights is None else weights + kv_cache_bytes


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (what can be allocated without swapping), else free physical pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
