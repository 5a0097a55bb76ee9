"""The disk tier's loader thread: reads and verifies entries ahead of the engine (issue 27 item 2).

Plain Python and bytes only: `KVDiskStore.read` (open, readinto, header, CRC-32, chain hash). No torch op
ever runs here: a second thread running torch ops would start a second OpenMP team beside the engine's and
slow every decode step (the shared-CPU history in README.md). The engine thread takes the verified payloads
(core/kvdisk/prefetch.py) and copies them into KV blocks between steps.

A job is one sequence's run of blocks, read in order; it stops at the first entry that is missing or does not
verify (the rest is computed, as any miss) and after a slow read (the tier then pauses its reads). Jobs of
submitted turns (priority 0) go before chats warmed on focus (priority 1), FIFO within a priority. Payloads
read but not yet taken are capped in bytes: past the cap the thread waits for the engine to take some.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .entry import BlockKey
from .store import KVDiskStore

log = logging.getLogger(__name__)

MAX_HELD_BYTES = 64 << 20  # payloads read but not yet copied into the KV cache (~87 blocks of SmolLM2-135M fp32)
PRIORITY_TURN = 0  # a submitted turn's prefix
PRIORITY_WARM = 1  # a chat warmed on focus (core/engine/warming.py)


@dataclass(eq=False, slots=True)
class ReadJob:
    keys: list[BlockKey]
    priority: int
    num_started: int = 0  # keys handed to store.read so far (loader thread)
    arrived: deque = field(default_factory=deque)  # verified payloads (memoryview), in key order, not yet taken
    stopped: bool = False  # nothing more will arrive: all read, a miss or bad entry, a slow read, or cancelled


class EntryLoader:
    def __init__(self, store: KVDiskStore, is_slow: Callable[[float], bool], on_slow: Callable[[float], None],
                 max_held_bytes: int = MAX_HELD_BYTES) -> None:
        self.store = store  # its `read` is looked up at each call (tests inject faults on it)
        self.is_slow, self.on_slow = is_slow, on_slow
        self.max_held_bytes = max_held_bytes
        self.num_held_bytes = 0
        self._jobs: list[ReadJob] = []  # with keys left to read, in submission order
        self._cond = threading.Condition()
        self._arrival = threading.Event()  # set on every payload or stop; the engine thread waits on it when idle
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="llmchat-kv-loader", daemon=True)
        self._thread.start()

    # -- engine thread ----------------------------------------------------------------------
    def submit(self, keys: list[BlockKey], priority: int) -> ReadJob:
        job = ReadJob(list(keys), priority)
        with self._cond:
            if not job.keys or self._closed:
                job.stopped = True
            else:
                self._jobs.append(job)
                self._cond.notify_all()
        return job

    def take(self, job: ReadJob) -> tuple[list[memoryview], bool]:
        """The payloads arrived for `job` since the last take, and whether the job has stopped."""
        with self._cond:
            payloads = list(job.arrived)
            job.arrived.clear()
            if payloads:
                self.num_held_bytes -= sum(p.nbytes for p in payloads)
                self._cond.notify_all()
            return payloads, job.stopped

    def cancel(self, job: ReadJob) -> None:
        """Drop the job's reads not yet made and its payloads not yet taken."""
        with self._cond:
            job.stopped = True
            if job in self._jobs:
                self._jobs.remove(job)
            self.num_held_bytes -= sum(p.nbytes for p in job.arrived)
            job.arrived.clear()
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        """Sleep until a payload arrives or a job stops (at most `timeout` s): an engine with nothing else to do."""
        self._arrival.wait(timeout)
        self._arrival.clear()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for job in self._jobs:
                job.stopped = True
            self._jobs.clear()
            self._cond.notify_all()
        self._thread.join(timeout=5)

    # -- loader thread ----------------------------------------------------------------------
    def _next(self) -> tuple[ReadJob, BlockKey] | None:
        """Under the lock: the next key to read (a turn's before a warm chat's), waiting while the cap is reached."""
        while not self._closed:
            if self._jobs and self.num_held_bytes < self.max_held_bytes:
                job = min(self._jobs, key=lambda j: j.priority)  # min() keeps the first of equals: FIFO
                job.num_started += 1
                if job.num_started == len(job.keys):
                    self._jobs.remove(job)  # its last read is under way
                return job, job.keys[job.num_started - 1]
            self._cond.wait()
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                picked = self._next()
            if picked is None:
                return
            job, key = picked
            start = time.monotonic()
            try:
                payload = self.store.read(key)
            except Exception:  # noqa: BLE001 - a bug here costs the tier (the block is computed), never the engine
                log.exception("disk KV read failed")
                payload = None
            seconds = time.monotonic() - start
            slow = payload is not None and self.is_slow(seconds)
            with self._cond:
                if not job.stopped:
                    if payload is not None:
                        job.arrived.append(payload)
                        self.num_held_bytes += payload.nbytes
                    if payload is None or slow or job.num_started == len(job.keys):
                        job.stopped = True
                        if job in self._jobs:
                            self._jobs.remove(job)
            self._arrival.set()
            if slow:
                self.on_slow(seconds)
