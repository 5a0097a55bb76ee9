"""`llmchat bench shared-cpu` at a tiny size on the real default model: both set-ups' rows, and the busy
process it starts is gone afterwards, also when the bench is interrupted (Ctrl+C) or its set-up killed."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from llmchat.core.bench.shared_cpu import SharedCpuSize, measure_phases
from test_busy_process import gone, wait_gone

CLI = [sys.executable, "-m", "llmchat.tui.commands.cli", "bench", "shared-cpu", "--quick"]


def busy_pids(stderr: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"busy process (\d+) started", stderr)]


@pytest.mark.slow
def test_bench_shared_cpu_reports_both_setups_and_ends_its_busy_process(default_model_dir, tmp_path):
    out = tmp_path / "bench.jsonl"
    result = subprocess.run([*CLI, "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    rows = {(r["variant"], r["metric"]): r for r in map(json.loads, out.read_text().splitlines())}
    assert {r["scenario"] for r in rows.values()} == {"shared-cpu"}
    for setup in ("ask", "app"):
        quiet, busy = rows[(setup, "tpot_quiet")]["value"], rows[(setup, "tpot_busy")]["value"]
        assert quiet > 0 and busy > 0 and rows[(setup, "tpot_busy")]["unit"] == "ms"
        assert rows[(setup, "slowdown_busy")]["value"] == pytest.approx(busy / quiet)
        assert rows[(setup, "threads_busy")]["value"] >= 1 and rows[(setup, "threads_quiet")]["value"] >= 1
    assert "slowdown_busy" in result.stdout  # the table
    pids = busy_pids(result.stderr)
    assert len(pids) == 2 and all(gone(pid) for pid in pids)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl+c", "set-up killed"])
def test_an_interrupted_bench_leaves_no_busy_process(default_model_dir, how):
    bench = subprocess.Popen(CLI, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                             start_new_session=True)
    try:
        pid = None
        for line in bench.stderr:
            if busy_pids(line):
                pid = busy_pids(line)[0]
                break
        assert pid is not None and not gone(pid)
        if how == "ctrl+c":  # the terminal sends SIGINT to the whole foreground group
            os.killpg(bench.pid, signal.SIGINT)
        else:  # the set-up's process dies outright: its busy process must notice
            setup = int(open(f"/proc/{pid}/stat").read().split(") ", 1)[1].split()[1])  # the busy process's parent
            os.kill(setup, signal.SIGKILL)
        bench.communicate(timeout=120)
        assert wait_gone(pid), "the busy process outlived the bench"
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()


def test_measure_phases_runs_quiet_then_beside_a_live_busy_process():
    import asyncio

    seen: list[bool] = []
    size = SharedCpuSize(num_tokens=2, repeats=2, settle_s=0.0)
    state = {}

    async def reply() -> tuple[float, int]:
        busy = state.get("pid")
        seen.append(busy is not None and not gone(busy))
        return 0.01 * (1 + seen[-1]), 2 - seen[-1]

    def log(line: str) -> None:
        if "started" in line:
            state["pid"] = int(line.split()[2])

    result = asyncio.run(measure_phases("fake", reply, size, log))
    assert seen == [False, False, False, True, True, True]  # warm-up + 2 quiet, warm-up + 2 beside it
    assert result.quiet_tpot == [10.0, 10.0] and result.busy_tpot == [20.0, 20.0]
    assert (result.quiet_threads, result.busy_threads) == (2, 1)
    assert gone(result.busy_pid)


def test_the_apps_set_up_stops_with_the_load_failure_instead_of_waiting(tmp_path):
    import asyncio
    import time

    from llmchat.core.config import EngineConfig
    from llmchat.tui.commands.bench_shared_cpu import measure_app

    missing = tmp_path / "no-such-model.gguf"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="could not load its model.*no-such-model"):
        asyncio.run(measure_app(EngineConfig(model=str(missing), kv_disk_bytes=0), SharedCpuSize(4, 1, 0.0), print))
    assert time.monotonic() - started < 60
