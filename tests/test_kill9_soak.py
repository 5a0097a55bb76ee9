"""Durability, measured (issue 26, item 6): the turn flow (store, engine, disk tier) is killed with SIGKILL 20
times at random points, while it streams and while it stores a chat operation, and reopened each time."""
from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmchat.core.chats.store import ChatStore
from llmchat.core.kvdisk.folder import TEMP_SUFFIX

WORKER = Path(__file__).with_name("kill9_worker.py")


@pytest.mark.slow
def test_kill_9_twenty_times_loses_no_completed_turn(tiny_model_dir, tmp_path):
    data_dir, kv_dir = tmp_path / "data", tmp_path / "kv"
    rng = random.Random(26)
    done: dict[int, int] = {}  # chat id -> messages it had when a turn's finish was reported stored
    num_interrupted = num_turns = 0
    started = time.perf_counter()
    for round_no in range(20):
        proc = subprocess.Popen([sys.executable, str(WORKER), str(data_dir), str(kv_dir), str(tiny_model_dir),
                                 str(round_no)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + rng.uniform(0.05, 1.5)
        while time.monotonic() < deadline:
            line = proc.stdout.readline().split()
            if line and line[0] == "DONE":
                done[int(line[1])] = int(line[2])
                num_turns += 1
        proc.send_signal(signal.SIGKILL)
        for line in proc.stdout.read().splitlines():  # what it printed before it died
            if line.startswith("DONE"):
                _, chat_id, n = line.split()
                done[int(chat_id)] = int(n)
                num_turns += 1
        proc.wait()
        db = sqlite3.connect(data_dir / "chats.sqlite3")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        db.close()
        store = ChatStore(data_dir)  # reopening marks what was streaming as interrupted
        for chat_id, n in done.items():
            conv = store.load_chat(chat_id)
            assert len(conv.messages) >= n, f"chat {chat_id} lost a completed turn"
            last = conv.messages[n - 1]  # the reply whose finish was reported stored
            assert last.role == "assistant" and last.status == "done" and last.content is not None
        statuses = [m.status for s in store.list_chats() for m in store.load_chat(s.chat_id).messages]
        assert "streaming" not in statuses
        num_interrupted = statuses.count("interrupted")
        store.close()
    leftover = list(kv_dir.rglob(f"*{TEMP_SUFFIX}"))  # a killed writer's temp files go when a tier next opens
    print(f"\n20 kills in {time.perf_counter() - started:.0f} s: {num_turns} turns completed, 0 lost, "
          f"{num_interrupted} replies marked interrupted, {len(leftover)} temp files awaiting the next open")
