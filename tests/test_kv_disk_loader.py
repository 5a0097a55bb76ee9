"""The disk tier's loader thread (core/kvdisk/loader.py): reads in key order off the caller's thread, stops at a
miss, holds no more payload bytes than its cap until they are taken, reads a turn's keys before a warm chat's,
drops a cancelled job's reads, and a slow read stops its job and says so."""
from __future__ import annotations

import threading
import time

import torch

from llmchat.core.kvdisk.loader import PRIORITY_TURN, PRIORITY_WARM, EntryLoader
from llmchat.core.kvdisk.store import KVDiskStore

from test_kv_disk import key, layout

NBYTES = 4096


def store_with(tmp_path, n: int) -> KVDiskStore:
    store = KVDiskStore(tmp_path, layout(NBYTES), 1 << 30)
    for i in range(n):
        store.put(key(i), torch.full((NBYTES // 4,), float(i)))
    assert store.flush()
    return store


class Recording:
    """store.read, recording which keys were read on which thread; a read may be held until `go` is set."""

    def __init__(self, store: KVDiskStore, delay_s: float = 0.0):
        self.real, self.read, self.threads, self.delay_s = store.read, [], set(), delay_s
        self.go = threading.Event()
        self.go.set()

    def __call__(self, k):
        self.read.append(k)
        self.threads.add(threading.get_ident())
        assert self.go.wait(30)
        time.sleep(self.delay_s)
        return self.real(k)


def loader_for(store, recording, cap=1 << 30, slow=lambda s: False, on_slow=lambda s: None) -> EntryLoader:
    store.read = recording
    return EntryLoader(store, slow, on_slow, cap)


def take_all(loader, job, timeout=10.0) -> list:
    out, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        payloads, stopped = loader.take(job)
        out += payloads
        if stopped:
            return out
        loader.wait(0.01)
    raise AssertionError("the job never stopped")


def value_of(payload) -> float:
    return torch.frombuffer(bytearray(payload), dtype=torch.float32)[0].item()


def test_reads_in_order_off_the_callers_thread_and_stops_at_a_miss(tmp_path):
    store = store_with(tmp_path, 5)
    rec = Recording(store)
    loader = loader_for(store, rec)
    job = loader.submit([key(0), key(1), key(2), key(99), key(3)], PRIORITY_TURN)
    assert [value_of(p) for p in take_all(loader, job)] == [0.0, 1.0, 2.0], "verified payloads, up to the miss"
    assert rec.read == [key(0), key(1), key(2), key(99)] and threading.get_ident() not in rec.threads
    assert loader.num_held_bytes == 0
    loader.close()


def test_payloads_not_taken_are_capped(tmp_path):
    store = store_with(tmp_path, 8)
    rec = Recording(store)
    loader = loader_for(store, rec, cap=2 * NBYTES)
    job = loader.submit([key(i) for i in range(8)], PRIORITY_TURN)
    time.sleep(0.3)
    assert len(rec.read) == 2 and loader.num_held_bytes == 2 * NBYTES, "it waits at the cap"
    assert len(take_all(loader, job)) == 8  # taking makes room: the rest is read
    loader.close()


def test_a_turns_reads_go_before_a_warm_chats_and_a_cancelled_job_reads_no_more(tmp_path):
    store = store_with(tmp_path, 8)
    rec = Recording(store)
    rec.go.clear()
    loader = loader_for(store, rec)
    warm = loader.submit([key(i) for i in range(4)], PRIORITY_WARM)
    for _ in range(100):
        if rec.read:
            break
        time.sleep(0.01)
    dropped = loader.submit([key(6), key(7)], PRIORITY_TURN)
    turn = loader.submit([key(4), key(5)], PRIORITY_TURN)
    loader.cancel(dropped)
    rec.go.set()
    assert len(take_all(loader, turn)) == 2 and len(take_all(loader, warm)) == 4
    assert rec.read == [key(0), key(4), key(5), key(1), key(2), key(3)], "warm's first read was under way"
    assert loader.take(dropped) == ([], True) and loader.num_held_bytes == 0
    loader.close()


def test_a_slow_read_stops_its_job_after_that_block_and_is_reported(tmp_path):
    store = store_with(tmp_path, 4)
    rec, reported = Recording(store, delay_s=0.05), []
    loader = loader_for(store, rec, slow=lambda s: s > 0.04, on_slow=reported.append)
    job = loader.submit([key(i) for i in range(4)], PRIORITY_TURN)
    assert len(take_all(loader, job)) == 1 and len(rec.read) == 1
    assert len(reported) == 1 and reported[0] > 0.04
    loader.close()
