"""The disk tier's files: one entry per full KV block, named by its chain hash, under `<cache dir>/kv/`.

- Writes run on a writer thread (the engine thread only copies the block out of the paged cache); each is
  atomic: a temp file named with the writer's pid, fsync of the data, then rename. Temp files of processes
  that no longer run (a kill -9 mid-write) are removed when a store opens.
- Reads (on the loader thread, core/kvdisk/loader.py) verify every entry (core/kvdisk/entry.py); a bad one is
  removed and counted, never used.
- A byte budget with LRU eviction by last use (the file's mtime, refreshed on every hit, so it survives
  restarts). A block shared by many chats has one chain hash, hence one file.
- Counters (hits, corrupt, writes, evictions, dropped) are kept per process and added to `stats.json`
  under a file lock, so `llmchat cache` can report them across runs.
- The folder's layout, scanning, clearing and the lifetime counters: core/kvdisk/folder.py (0700/0600: KV
  is derived from the user's chats).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..api.metrics import DiskTierStats
from .folder import (
    TEMP_SUFFIX, DiskCounters, FolderEntry, add_lifetime_counters, entry_path, make_private_dir,
    read_lifetime_counters, scan,
)
from .entry import BadEntry, BlockKey, BlockLayout, decode_entry, encode_header

log = logging.getLogger(__name__)

MAX_PENDING_BYTES = 512 << 20  # writes queued beyond this are dropped (counted), never allowed to stall decoding
WRITE_PAUSE_S = 60.0  # after a failed write (full or read-only disk, I/O error) writes stop this long (dropped)


class KVDiskStore:
    def __init__(self, root: Path, layout: BlockLayout, budget_bytes: int):
        if budget_bytes <= 0:
            raise ValueError("the disk tier's budget must be positive (use --no-kv-disk to turn it off)")
        self.root = Path(root)
        self.layout = layout
        self.budget_bytes = budget_bytes
        make_private_dir(self.root)
        self._lock = threading.Lock()
        self._index, cleaned = scan(self.root, clean_temp=True)
        self._num_bytes = sum(e.num_bytes for e in self._index.values())
        self.counters = DiskCounters(num_temp_cleaned=cleaned)
        self._saved = DiskCounters()  # the part of self.counters already added to stats.json
        self._lifetime_base = read_lifetime_counters(self.root)  # other processes' counts, as of opening
        self._pending: set[bytes] = set()
        self._pending_bytes = 0
        self._temp_ids = iter(range(1 << 62))
        self._writes_paused_until = 0.0  # time.monotonic(): after a failed write, new writes are dropped until then
        self.write_error: str | None = None  # the first failed write's reason (one notice per process)
        self._queue: queue.Queue[tuple[BlockKey, torch.Tensor] | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="llmchat-kv-disk", daemon=True)
        self._writer.start()
        self._evict_over_budget()

    # -- engine thread ----------------------------------------------------------------------
    def contains(self, block_hash: bytes, probe_disk: bool = False) -> bool:
        """Whether an entry is known; probe_disk also looks for one another process wrote since we scanned."""
        with self._lock:
            if block_hash in self._index:
                return True
        if not probe_disk:
            return False
        try:
            st = entry_path(self.root, block_hash).stat()
        except OSError:
            return False
        with self._lock:
            if block_hash not in self._index:
                self._index[block_hash] = FolderEntry(st.st_size, st.st_mtime)
                self._num_bytes += st.st_size
        return True

    def read(self, key: BlockKey) -> memoryview | None:
        """The verified payload of the entry for key, or None (missing, or bad: then it is removed). Called on
        the loader thread (core/kvdisk/loader.py): bytes and plain Python only, no torch."""
        path = entry_path(self.root, key.block_hash)
        try:
            with open(path, "rb") as f:
                data = bytearray(os.fstat(f.fileno()).st_size)  # writable: the payload becomes a tensor view
                num_read = f.readinto(data)
        except OSError:  # gone (evicted by another process) or unreadable: a miss
            self._drop(key.block_hash)
            return None
        try:
            if num_read != len(data):  # cut short while we read it: entries are renamed whole, so it is damaged
                raise BadEntry(f"short read: {num_read} of {len(data)} bytes")
            payload = decode_entry(data, key, self.layout)
        except BadEntry as e:
            log.warning("disk KV entry %s is bad (%s): removed, the block is recomputed", path.name, e)
            with self._lock:
                self.counters.num_corrupt += 1
            self._drop(key.block_hash, unlink=True)
            return None
        with self._lock:
            self.counters.num_hits += 1
        self.touch(key.block_hash)
        return payload

    def touch(self, block_hash: bytes) -> None:
        """Mark an entry used now (LRU), in memory and in its mtime."""
        t = time.time()
        with self._lock:
            entry = self._index.get(block_hash)
            if entry is None:
                return
            entry.last_used = t
        try:
            os.utime(entry_path(self.root, block_hash), (t, t))
        except OSError:
            pass

    def put(self, key: BlockKey, payload: torch.Tensor) -> bool:
        """Queue a block for writing (payload: a CPU tensor this store may keep); False if skipped."""
        with self._lock:
            if key.block_hash in self._index or key.block_hash in self._pending:
                return False
            if self._pending_bytes + self.layout.nbytes > MAX_PENDING_BYTES or \
                    time.monotonic() < self._writes_paused_until:
                self.counters.num_dropped += 1
                return False
            self._pending.add(key.block_hash)
            self._pending_bytes += self.layout.nbytes
        self._queue.put((key, payload))
        return True

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every queued write is on disk; False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline or not self._writer.is_alive():
                return False
            time.sleep(0.002)
        return True

    def close(self, timeout: float = 60.0) -> None:
        self.flush(timeout)
        self._queue.put(None)
        self._writer.join(timeout=5)
        self._save_counters()

    def count_known(self, hashes) -> int:
        """How many of these hashes have an entry (by the index: no file is touched)."""
        with self._lock:
            return sum(1 for h in hashes if h in self._index)

    def stats(self) -> DiskTierStats:
        with self._lock:
            num_entries, num_bytes = len(self._index), self._num_bytes
            session = DiskCounters(**asdict(self.counters))
        return DiskTierStats(str(self.root), num_entries, num_bytes, self.budget_bytes, session,
                             self._lifetime_base.plus(session))

    # -- writer thread ----------------------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write(*item)
                if self._queue.empty():
                    self._evict_over_budget()
                    self._save_counters()
            except OSError as e:  # a full or read-only disk, an I/O error: it costs the tier, never the engine
                self._write_failed(e)
            except Exception:  # noqa: BLE001 - a bug here costs the tier, never the engine
                log.exception("disk KV write failed")
            finally:
                if item is not None:
                    with self._lock:
                        self._pending.discard(item[0].block_hash)
                        self._pending_bytes -= self.layout.nbytes
                self._queue.task_done()

    def _write(self, key: BlockKey, payload: torch.Tensor) -> None:
        data = memoryview(payload.contiguous().view(-1).view(torch.uint8).numpy())  # any dtype, bf16 included
        header = encode_header(key, self.layout, data)
        path = entry_path(self.root, key.block_hash)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{next(self._temp_ids)}{TEMP_SUFFIX}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        size = len(header) + data.nbytes
        with self._lock:
            old = self._index.get(key.block_hash)
            self._num_bytes += size - (old.num_bytes if old else 0)
            self._index[key.block_hash] = FolderEntry(size, time.time())
            self.counters.num_writes += 1

    def _write_failed(self, error: OSError) -> None:
        """Stop writing for a while (the queued writes are dropped, counted); say so once per process."""
        with self._lock:
            self._writes_paused_until = time.monotonic() + WRITE_PAUSE_S
            self.counters.num_dropped += 1
            first = self.write_error is None
            if first:
                self.write_error = error.strerror or str(error)
        if first:
            log.warning("the disk tier cannot write to %s (%s): replies are computed as usual, its new blocks are "
                        "not kept on disk; free space or fix the folder (or use --no-kv-disk)", self.root,
                        self.write_error)

    def _evict_over_budget(self) -> None:
        """Remove the least recently used entries until the store is back under 90% of its budget."""
        with self._lock:
            if self._num_bytes <= self.budget_bytes:
                return
            order = sorted(self._index.items(), key=lambda item: item[1].last_used)
            victims = []
            target = int(self.budget_bytes * 0.9)
            for block_hash, entry in order:
                if self._num_bytes <= target:
                    break
                del self._index[block_hash]
                self._num_bytes -= entry.num_bytes
                victims.append(block_hash)
            self.counters.num_evictions += len(victims)
        for block_hash in victims:
            entry_path(self.root, block_hash).unlink(missing_ok=True)

    # -- both -------------------------------------------------------------------------------
    def _drop(self, block_hash: bytes, unlink: bool = False) -> None:
        with self._lock:
            entry = self._index.pop(block_hash, None)
            if entry is not None:
                self._num_bytes -= entry.num_bytes
        if unlink:
            entry_path(self.root, block_hash).unlink(missing_ok=True)

    def _save_counters(self) -> None:
        with self._lock:
            snapshot = DiskCounters(**asdict(self.counters))
            delta = snapshot.minus(self._saved)
            self._saved = snapshot
        if any(asdict(delta).values()):
            try:
                add_lifetime_counters(self.root, delta)
            except OSError:
                log.exception("could not record the disk tier's counters")
