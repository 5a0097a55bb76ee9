"""How many threads the engine's one compute team gets: the CPUs this process may use, not the machine's.

`os.cpu_count()` counts the machine; a process pinned to fewer CPUs (taskset, a cpuset) or limited by a
cgroup CPU quota (a container's `--cpus 1.5`) that starts a thread per counted CPU has OpenMP threads wait
at every barrier for a teammate that cannot run. The count here is the affinity mask's size, capped by the
quota (rounded up: a throttled cgroup stops all its threads together, so a barrier does not wait on one).
`--threads N`, `threads = N` in the config file, or OMP_NUM_THREADS fix it (in that order); otherwise it
is "auto", and the engine may use fewer while other programs are busy (core/cpu_load.py).

Stdlib only; torch is imported only by `use_threads`, which sets the calling thread's team.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class ThreadPlan:
    """The compute team's size and where it comes from."""

    num_threads: int  # the team's size at start
    num_cpus: int  # the CPUs this process may use (affinity, capped by the cgroup quota)
    adaptive: bool  # True: auto, fewer threads while other programs keep CPUs busy; False: fixed by the user
    source: str  # "auto", "--threads" (the flag or the config file's `threads`) or "OMP_NUM_THREADS"

    def describe(self, num_threads: int | None = None) -> str:
        """'2 of 2 CPUs (auto: ...)'; num_threads: the team's size now, if it changed since the start."""
        how = "auto: fewer while other programs are busy" if self.adaptive else f"set by {self.source}"
        return f"{self.num_threads if num_threads is None else num_threads} of {self.num_cpus} CPUs ({how})"


def affinity_count() -> int:
    """How many CPUs this process may run on (its affinity mask; os.cpu_count() where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _cgroup_paths(proc_cgroup: Path) -> dict[str, str]:
    """{controller: path} of this process: '' for cgroup v2's unified line, 'cpu' for v1's cpu controller."""
    paths: dict[str, str] = {}
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            paths[""] = path
        for name in controllers.split(","):
            if name == "cpu":
                paths["cpu"] = path
    return paths


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _v2_quota(folder: Path) -> float | None:
    text = _read(folder / "cpu.max")  # "max 100000" or "150000 100000"
    if text is None:
        return None
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = int(fields[0]), int(fields[1])
    return quota / period if quota > 0 and period > 0 else None


def _v1_quota(folder: Path) -> float | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    q, p = int(quota), int(period)
    return q / p if q > 0 and p > 0 else None


def _ancestors(root: Path, path: str) -> list[Path]:
    """root/path and each folder above it up to root (a quota anywhere up the tree limits this process)."""
    parts = [p for p in path.strip("/").split("/") if p]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_cpu_quota(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota on this process's cgroup and its parents, in CPUs (1.5 = one and a half);
    None where there is none (or no cgroup filesystem). cgroup v2 (`cpu.max`) and v1 (`cpu.cfs_quota_us`)."""
    paths = _cgroup_paths(proc_cgroup)
    quotas: list[float] = []
    if "" in paths:
        quotas += [q for f in _ancestors(root, paths[""]) if (q := _v2_quota(f)) is not None]
    if "cpu" in paths:
        for base in (root / "cpu", root / "cpu,cpuacct"):
            quotas += [q for f in _ancestors(base, paths["cpu"]) if (q := _v1_quota(f)) is not None]
    return min(quotas) if quotas else None


def usable_cpus(affinity: int, quota: float | None) -> int:
    """CPUs this process may keep busy: the affinity count, capped by the quota rounded up; at least 1."""
    if quota is None:
        return max(1, affinity)
    return max(1, min(affinity, math.ceil(quota - 1e-9)))


def parse_thread_count(value: object, what: str) -> int:
    """A thread count the user gave (flag, config, env) as an int >= 1; ValueError naming `what` otherwise."""
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1 or isinstance(value, bool):
        raise ValueError(f"{what} must be a whole number of threads >= 1, not {value!r}")
    return n


def plan_threads(requested: int | None = None, source: str = "--threads", env: dict | None = None,
                 affinity: int | None = None, quota: float | None | bool = False) -> ThreadPlan:
    """The team for this process: `requested` (from `source`) if given, else OMP_NUM_THREADS if set, else the
    usable CPUs. affinity/quota: for tests (quota=False: read the cgroup files)."""
    env = os.environ if env is None else env
    num_cpus = usable_cpus(affinity_count() if affinity is None else affinity,
                           cgroup_cpu_quota() if quota is False else quota)
    if requested is not None:
        return ThreadPlan(parse_thread_count(requested, source), num_cpus, False, source)
    if env.get("OMP_NUM_THREADS", "").strip():
        value = env["OMP_NUM_THREADS"].split(",")[0]  # (a nested list: the outer level's count)
        return ThreadPlan(parse_thread_count(value, "OMP_NUM_THREADS"), num_cpus, False, "OMP_NUM_THREADS")
    return ThreadPlan(num_cpus, num_cpus, True, "auto")


def use_threads(num_threads: int) -> None:
    """Size the calling thread's compute team (OpenMP keeps one per thread that runs parallel ops)."""
    import torch

    if torch.get_num_threads() != num_threads:
        torch.set_num_threads(num_threads)
