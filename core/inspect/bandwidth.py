"""This machine's memory copy bandwidth: measured once (a large torch copy, best of a few) and cached in the
user cache dir, keyed by CPU model, device and thread count, so decode's achieved GB/s can be compared with
what the memory can do."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

CACHE_NAME = "machine.json"
COPY_BYTES = 128 << 20
NUM_REPEATS = 5


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure_copy_gb_s(num_bytes: int = COPY_BYTES, repeats: int = NUM_REPEATS, device: str = "cpu") -> float:
    """GB/s of dst.copy_(src) over num_bytes (read + write both counted), the best of `repeats`."""
    import torch

    src = torch.ones(num_bytes // 4, dtype=torch.float32, device=device)  # [n] (written, so resident)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * num_bytes / best / 1e9


def machine_key(device: str = "cpu") -> str:
    import torch

    return f"{cpu_model()}|{device}|{torch.get_num_threads()} threads"


def copy_bandwidth_gb_s(cache_dir: Path, device: str = "cpu", measure: bool = True) -> float | None:
    """The cached figure for this machine; measured and cached now if there is none (None if measure=False)."""
    path = Path(cache_dir) / CACHE_NAME
    key = machine_key(device)
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known.get(key), (int, float)):
        return float(known[key])
    if not measure:
        return None
    from ..passing_thread import run_in_passing_thread

    gb_s = run_in_passing_thread(lambda: measure_copy_gb_s(device=device))  # (the caller's thread may stay alive)
    known = known if isinstance(known, dict) else {}
    known[key] = gb_s
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(path)
    except OSError:  # a read-only cache dir: measured again next time
        pass
    return gb_s
