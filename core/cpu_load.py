"""Fewer compute threads while other programs keep this process's CPUs busy, all of them again once they stop.

Why: an OpenMP team splits every op of a decode step across its threads and waits at a barrier for all of
them. When another program takes one of two CPUs, the kernel deschedules one teammate for a time slice at a
time, and each of the step's hundreds of small ops waits for it: measured 30-50x slower (issue 22). One
thread fewer has no teammate to wait for and takes the CPU that is still free.

How: between steps, at most every `interval` seconds, the engine thread reads /proc/stat (the busy ticks of
the CPUs this process may use) and /proc/self/stat (this process's own ticks); the difference is what other
programs used. The team has one thread fewer per CPU they keep busy for HELD_INTERVALS intervals running (a
shell command or a terminal's redraw is a passing spike, seen on the shared dev machine), at least one, and
grows back as soon as they stop, with a margin either way so that it does not flap. Where /proc is missing
(not Linux) nothing adapts.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .cpu_threads import ThreadPlan, use_threads

PROC_STAT = Path("/proc/stat")
SELF_STAT = Path("/proc/self/stat")
SAMPLE_INTERVAL_S = 0.5
HELD_INTERVALS = 2  # other programs count for dropping a thread once they were busy this many intervals running
DROP_AT = 0.5  # a team of n loses a thread when fewer than n - 0.5 CPUs are left free by other programs
GROW_AT = 0.25  # and gains one back when at least n + 1 - 0.25 are free


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Busy ticks of the CPUs watched (all programs) and of this process, at one moment."""

    seconds: float
    busy_ticks: int
    own_ticks: int


def read_sample(cpus: frozenset[int], proc_stat: Path = PROC_STAT, self_stat: Path = SELF_STAT,
                clock: Callable[[], float] = time.monotonic) -> CpuSample | None:
    """Now's sample; None if /proc cannot be read. Ticks are USER_HZ in both files."""
    try:
        stat_lines = proc_stat.read_text().splitlines()
        own = self_stat.read_text()
    except OSError:
        return None
    busy = 0
    for line in stat_lines:
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        f = [int(x) for x in rest.split()]
        busy += f[0] + f[1] + f[2] + sum(f[5:8])  # user nice system (idle iowait) irq softirq steal
    fields = own[own.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3, utime 14, stime 15
    return CpuSample(clock(), busy, int(fields[11]) + int(fields[12]))


def others_busy_cpus(before: CpuSample, after: CpuSample, ticks_per_s: float) -> float:
    """CPUs' worth of time other programs used between the samples (>= 0)."""
    seconds = after.seconds - before.seconds
    if seconds <= 0:
        return 0.0
    others = (after.busy_ticks - before.busy_ticks) - (after.own_ticks - before.own_ticks)
    return max(0.0, others / ticks_per_s / seconds)


def next_team_size(current: int, most: int, others_held: float, others_now: float) -> int:
    """The team's size (1..most): one thread per CPU that other programs leave free, with a margin either way.
    A thread goes when they have kept CPUs busy for a while (others_held: the least over the last few intervals,
    so a passing spike costs nothing) and comes back as soon as they stop (others_now: the last interval)."""
    size = current
    while size > 1 and most - others_held < size - DROP_AT:
        size -= 1
    while size < most and most - others_now >= size + 1 - GROW_AT:
        size += 1
    return size


class ThreadGovernor:
    """The compute team of the thread that steps the engine: sized by the plan; when the plan is adaptive,
    resized between steps to the CPUs other programs leave free. Call before_step() on the stepping thread."""

    def __init__(self, plan: ThreadPlan, interval: float = SAMPLE_INTERVAL_S,
                 sample: Callable[[], CpuSample | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        self.interval = interval
        self.num_threads = plan.num_threads
        self.num_changes = 0  # how often the team was resized (for tests and the bench)
        try:
            cpus = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = frozenset(range(os.cpu_count() or 1))
        self._clock = clock
        self._sample = sample or (lambda: read_sample(cpus, clock=clock))
        self._ticks_per_s = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._applied_on: int | None = None  # the thread whose team was last sized
        self._last: CpuSample | None = self._sample() if plan.adaptive else None
        self.others = 0.0  # CPUs' worth other programs used over the last interval
        self._recent: deque[float] = deque(maxlen=HELD_INTERVALS)

    def before_step(self) -> None:
        if self._last is not None and self._clock() - self._last.seconds >= self.interval:
            sample = self._sample()
            if sample is not None:
                self.others = others_busy_cpus(self._last, sample, self._ticks_per_s)
                self._last = sample
                self._recent.append(self.others)
                held = min(self._recent) if len(self._recent) == self._recent.maxlen else 0.0
                size = next_team_size(self.num_threads, self.plan.num_threads, held, self.others)
                if size != self.num_threads:
                    self.num_threads = size
                    self.num_changes += 1
                    self._applied_on = None
        me = threading.get_ident()
        if self._applied_on != me:
            use_threads(self.num_threads)
            self._applied_on = me
