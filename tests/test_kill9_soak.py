"""Durability, measured (issue 26, item 6): the turn flow (store, engine, disk tier) is killed with SIGKILL 20
times at random points, while it streams and while it stores a chat operation, and reopened each time."""
from __future__ import annotations

import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llmchat.core.api.events import Finished
from llmchat.core.api.params import SamplingParams
from llmchat.core.chats.store import ChatStore
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.model.loader import load_model
from llmchat.core.kvdisk.folder import TEMP_SUFFIX

WORKER = Path(__file__).with_name("kill9_worker.py")


@pytest.mark.slow
def test_kill_9_twenty_times_loses_no_completed_turn(tiny_model_dir, tmp_path):
    data_dir, kv_dir = tmp_path / "data", tmp_path / "kv"
    rng = random.Random(26)
    done: dict[int, int] = {}  # chat id -> messages it had when a turn's finish was reported stored
    num_interrupted = num_turns = num_killed_in_op = 0
    started = time.perf_counter()
    for round_no in range(20):
        proc = subprocess.Popen([sys.executable, str(WORKER), str(data_dir), str(kv_dir), str(tiny_model_dir),
                                 str(round_no)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "READY"
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
        reader.start()
        seen: list[str] = []
        if round_no % 2:  # during a chat operation: as the worker stores a rename
            while seen[-1:] != ["OP\n"]:
                seen.append(lines.get(timeout=60))
            num_killed_in_op += 1
        else:  # at a random point of the turn flow, streaming most of the time
            time.sleep(rng.uniform(0.05, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join(10)
        while not lines.empty():
            seen.append(lines.get())
        complete = [line for line in seen if line.endswith("\n")]  # the kill may cut the last line short
        for fields in map(str.split, complete):
            if fields[:1] == ["DONE"]:
                done[int(fields[1])] = int(fields[2])
                num_turns += 1
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
    soak_s = time.perf_counter() - started
    left_at_kill = len(list(kv_dir.rglob(f"*{TEMP_SUFFIX}")))  # a killed writer's temp files go when a tier opens
    loaded = load_model(tiny_model_dir)
    warm = LLMEngine(loaded, EngineConfig(kv_cache_bytes=4 << 20, kv_disk_bytes=1 << 26, kv_disk_dir=str(kv_dir)))
    assert not list(kv_dir.rglob(f"*{TEMP_SUFFIX}")), "the reopened tier removed the dead writers' temp files"
    cold = LLMEngine(loaded, EngineConfig(kv_cache_bytes=4 << 20, kv_disk_bytes=0, enable_prefix_caching=False))
    store = ChatStore(data_dir)
    num_disk_tokens = 0
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    for summary in store.list_chats():  # every chat's ids again: from the disk tier, then with no cache at all
        ids = store.load_chat(summary.chat_id).token_ids
        if len(ids) < 2:
            continue
        warm.add_request(ids, params)
        cold.add_request(ids, params)
        (from_disk,), (computed,) = finished(warm), finished(cold)
        assert from_disk.output_ids == computed.output_ids
        num_disk_tokens += from_disk.metrics.num_disk_tokens
    store.close()
    counters = warm.kv_disk.store.counters
    warm.close()
    print(f"\n20 kills ({num_killed_in_op} during a rename) in {soak_s:.0f} s: {num_turns} turns completed, 0 lost, {num_interrupted} replies marked "
          f"interrupted; {left_at_kill} temp files left by the kills, 0 after reopening; replay: {num_disk_tokens} "
          f"tokens from disk, {counters.num_corrupt} bad entries (removed), outputs identical to no cache")
    assert num_disk_tokens > 0


def finished(engine: LLMEngine) -> list[Finished]:
    return [e for e in engine.run_until_done() if isinstance(e, Finished)]
