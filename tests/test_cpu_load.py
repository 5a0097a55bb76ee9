"""Adapting the compute team to load: /proc samples from fake files, the sizing rule (against a slow obvious
reference on random inputs), and the governor resizing the stepping thread's team and growing back."""
from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from llmchat.core.cpu_load import (DROP_AT, GROW_AT, CpuSample, ThreadGovernor, next_team_size, others_busy_cpus,
                                   read_sample)
from llmchat.core.cpu_threads import ThreadPlan

STAT = """cpu  300 0 100 900 5 0 0 0 0 0
cpu0 100 0 50 400 5 0 0 0 0 0
cpu1 200 0 50 500 0 1 2 3 0 0
cpu2 9999 0 0 0 0 0 0 0 0 0
intr 1 2 3
"""
SELF = "1234 (python (x) y) R 1 1 1 0 -1 4194304 1 0 0 0 40 20 0 0 20 0 5 0 1 1 1\n"


def test_read_sample_counts_the_watched_cpus_and_this_process(tmp_path: Path):
    (tmp_path / "stat").write_text(STAT)
    (tmp_path / "self").write_text(SELF)
    sample = read_sample(frozenset({0, 1}), tmp_path / "stat", tmp_path / "self", clock=lambda: 7.0)
    # cpu0: 100 + 50; cpu1: 200 + 50 + irq 1 + softirq 2 + steal 3 (idle and iowait are not busy); cpu2 not watched
    assert sample == CpuSample(7.0, 150 + 256, 60)
    assert read_sample(frozenset({0}), tmp_path / "missing", tmp_path / "self") is None


def test_others_busy_is_what_this_process_did_not_use():
    before, after = CpuSample(0.0, 1000, 300), CpuSample(2.0, 1300, 400)  # 300 ticks busy, 100 of them ours
    assert others_busy_cpus(before, after, 100.0) == 1.0  # 200 ticks over 2 s at 100 Hz: one CPU
    assert others_busy_cpus(before, CpuSample(2.0, 1050, 400), 100.0) == 0.0  # (never negative)
    assert others_busy_cpus(before, CpuSample(0.0, 1300, 300), 100.0) == 0.0


def next_team_size_ref(current: int, most: int, held: float, now: float) -> int:
    """The rule spelled out: when the CPUs left free for a while fall short of the team by more than DROP_AT,
    the largest team that they fit (at least 1); else the largest team up to `most` whose last thread has
    1 - GROW_AT of a CPU free now."""
    if most - held < current - DROP_AT:
        return max([s for s in range(1, current) if most - held >= s - DROP_AT], default=1)
    return max([s for s in range(current + 1, most + 1) if most - now >= s - GROW_AT], default=current)


@given(st.integers(1, 16), st.integers(1, 16), st.floats(0, 20, allow_nan=False), st.floats(0, 20, allow_nan=False))
def test_next_team_size_matches_the_rule(current, most, a, b):
    current, held, now = min(current, most), min(a, b), max(a, b)  # (held is the least of recent intervals)
    size = next_team_size(current, most, held, now)
    assert size == next_team_size_ref(current, most, held, now)
    assert 1 <= size <= most


def test_busy_other_program_on_two_cpus_drops_one_thread_and_quiet_brings_it_back():
    assert next_team_size(2, 2, 0.67, 0.67) == 1  # a spin loop beside a team of two gets about 2/3 of a CPU
    assert next_team_size(2, 2, 0.1, 0.9) == 2  # a spike in the last interval only: keep both
    assert next_team_size(2, 2, 0.3, 0.3) == 2  # light background: keep both
    assert next_team_size(1, 2, 1.0, 1.0) == 1  # the spin loop has its CPU
    assert next_team_size(1, 2, 0.4, 0.4) == 1  # not clearly free yet
    assert next_team_size(1, 2, 0.1, 0.1) == 2


class FakeProc:
    """A clock and /proc counters the test moves by hand: `others` CPUs busy besides this process."""

    def __init__(self) -> None:
        self.t, self.busy, self.own = 0.0, 0, 0

    def advance(self, seconds: float, others: float, own: float = 0.5) -> None:
        self.t += seconds
        self.busy += int((others + own) * seconds * 100)
        self.own += int(own * seconds * 100)

    def sample(self) -> CpuSample:
        return CpuSample(self.t, self.busy, self.own)


def run_on_thread(fn):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("v", fn()))
    thread.start()
    thread.join()
    return out["v"]


def test_governor_resizes_the_stepping_threads_team():
    import torch

    proc = FakeProc()
    gov = ThreadGovernor(ThreadPlan(2, 2, True, "auto"), interval=0.5, sample=proc.sample, clock=lambda: proc.t)
    gov._ticks_per_s = 100.0

    def step_after(seconds: float, others: float) -> tuple[int, int]:
        proc.advance(seconds, others)
        return run_on_thread(lambda: (gov.before_step(), torch.get_num_threads())[1]), gov.num_threads

    assert step_after(0.1, 0.0) == (2, 2)
    assert step_after(0.5, 1.0) == (2, 2)  # other programs busy for one interval: a spike so far
    assert step_after(0.2, 1.0) == (2, 2)  # not yet a full interval since the last sample: no decision
    assert step_after(0.3, 1.0) == (1, 1)  # busy for two intervals running
    assert step_after(0.6, 1.0) == (1, 1)
    assert step_after(0.6, 0.0) == (2, 2)  # quiet again: back to both CPUs at once
    assert step_after(0.6, 1.0) == (2, 2)  # a spike
    assert step_after(0.6, 0.0) == (2, 2)
    assert gov.num_changes == 2


def test_a_fixed_plan_never_changes_and_reads_no_proc():
    calls = []
    gov = ThreadGovernor(ThreadPlan(1, 2, False, "--threads"), sample=lambda: calls.append(1) or CpuSample(0, 0, 0))
    for _ in range(3):
        gov.before_step()
    assert gov.num_threads == 1 and calls == [] and gov.num_changes == 0


def test_read_sample_on_this_machine_sees_this_process_work():
    import os

    cpus = frozenset(os.sched_getaffinity(0))
    before = read_sample(cpus)
    x = 0
    while (read_sample(cpus).own_ticks - before.own_ticks) < 2:  # spins until /proc shows this process's time
        x += 1
    after = read_sample(cpus)
    # ours is part of all; /proc/stat's per-CPU totals may trail the process's own count by a tick or two
    # (seen on CI: own +2, busy +0 within 9 ms), so give them up to 2 s to catch up
    import time

    deadline = time.monotonic() + 2.0
    while after.busy_ticks - before.busy_ticks < after.own_ticks - before.own_ticks - 1 and time.monotonic() < deadline:
        x += 1
        now = read_sample(cpus)
        after = type(now)(now.seconds, now.busy_ticks, after.own_ticks)  # the busy total catching up, ours as it was
    assert after.busy_ticks - before.busy_ticks >= after.own_ticks - before.own_ticks - 1
