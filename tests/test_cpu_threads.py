"""The compute team's size: the CPUs this process may use (affinity, cgroup quota from fake files), the flag,
the config file and OMP_NUM_THREADS; and that the team is the calling thread's."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from llmchat.core.cpu_threads import (ThreadPlan, cgroup_cpu_quota, parse_thread_count, plan_threads, usable_cpus,
                                      use_threads)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_is_the_tightest_on_the_way_up(tmp_path):
    proc = tmp_path / "cgroup"
    write(proc, "0::/user.slice/app.scope\n")
    root = tmp_path / "fs"
    write(root / "cpu.max", "max 100000\n")
    write(root / "user.slice" / "cpu.max", "300000 100000\n")  # 3 CPUs
    write(root / "user.slice" / "app.scope" / "cpu.max", "150000 100000\n")  # 1.5 CPUs
    assert cgroup_cpu_quota(proc, root) == pytest.approx(1.5)
    write(root / "user.slice" / "app.scope" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_quota(proc, root) == pytest.approx(3.0)


def test_cgroup_v1_quota_and_no_quota(tmp_path):
    proc = tmp_path / "cgroup"
    write(proc, "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    root = tmp_path / "fs"
    write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "50000\n")
    write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(proc, root) == pytest.approx(0.5)
    write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "-1\n")  # no limit
    assert cgroup_cpu_quota(proc, root) is None
    assert cgroup_cpu_quota(tmp_path / "missing", root) is None  # not Linux, no cgroup fs: no quota


def test_usable_cpus_caps_affinity_by_the_quota_rounded_up():
    assert usable_cpus(8, None) == 8
    assert usable_cpus(8, 1.5) == 2
    assert usable_cpus(8, 2.0) == 2
    assert usable_cpus(2, 16.0) == 2
    assert usable_cpus(4, 0.1) == 1


def test_plan_auto_uses_the_usable_cpus_and_adapts():
    plan = plan_threads(None, env={}, affinity=16, quota=3.5)
    assert plan == ThreadPlan(4, 4, True, "auto")
    assert "4 of 4 CPUs (auto" in plan.describe() and "1 of 4" in plan.describe(1)


def test_plan_from_the_flag_or_env_is_fixed():
    assert plan_threads(3, env={"OMP_NUM_THREADS": "7"}, affinity=2, quota=None) == ThreadPlan(3, 2, False, "--threads")
    env_plan = plan_threads(None, env={"OMP_NUM_THREADS": "5,2"}, affinity=2, quota=None)
    assert env_plan == ThreadPlan(5, 2, False, "OMP_NUM_THREADS")
    assert "set by OMP_NUM_THREADS" in env_plan.describe()


@pytest.mark.parametrize("bad", [0, -2, "two", True, "1.5"])
def test_bad_thread_counts_say_what_is_wrong(bad):
    with pytest.raises(ValueError, match="whole number of threads >= 1"):
        parse_thread_count(bad, "--threads")


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_a_bad_omp_num_threads_is_named(bad):
    with pytest.raises(ValueError, match="OMP_NUM_THREADS must be a whole number"):
        plan_threads(None, env={"OMP_NUM_THREADS": bad}, affinity=2, quota=None)


def test_this_process_plan_matches_its_affinity():
    plan = plan_threads(None, env={})
    assert plan.num_cpus <= len(os.sched_getaffinity(0)) and plan.num_threads == plan.num_cpus >= 1


def test_use_threads_sizes_the_calling_threads_team():
    import torch

    seen = {}

    def worker() -> None:
        use_threads(1)
        seen["in"] = torch.get_num_threads()

    before = torch.get_num_threads()
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["in"] == 1
    use_threads(before)
    assert torch.get_num_threads() == before
