"""The bench's busy process is always ended: when its block ends, raises or is interrupted, and when the
process that started it is killed outright."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from llmchat.core.bench.busy_process import busy_process


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")  # (a zombie not yet reaped by its new parent)
    except FileNotFoundError:
        return True


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_it_runs_inside_the_block_and_is_reaped_after():
    with busy_process() as proc:
        assert proc.poll() is None and not gone(proc.pid)
    assert proc.returncode is not None and gone(proc.pid)


def test_an_exception_or_ctrl_c_in_the_block_ends_it():
    for error in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(error)):
            with busy_process() as proc:
                raise error
        assert gone(proc.pid)


def test_it_ends_by_itself_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c",
                               "from llmchat.core.bench.busy_process import busy_process\nimport time\n"
                               "with busy_process() as p:\n    print(p.pid, flush=True)\n    time.sleep(600)\n"],
                              stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    assert not gone(pid)
    os.kill(parent.pid, signal.SIGKILL)  # no finally runs
    parent.wait()
    assert wait_gone(pid), "the busy process outlived the process that started it"
