"""Disk reads ahead of the engine step, the engine thread's side (issue 27 item 2).

A sequence whose next blocks are on disk (a submitted turn, or a chat warmed on focus) gets a read job on the
loader thread (core/kvdisk/loader.py) and a holder: a sequence of its own that keeps the resident prefix
referenced and takes one fresh block per payload. Between steps (`copy_arrived`, on the engine thread) each
verified payload is copied into its block and the block is hashed at once: an ordinary prefix-cache block,
shown in the block map as it arrives and found by any lookup. When the job stops (all read, a miss or a bad
entry, a slow read, no free block) the holder lets go: its blocks rest cached-free until the sequence is
admitted, whose lookup then finds them resident. `result` says what the disk supplied, for the sequence's
`num_disk_tokens` and `num_disk_failed_blocks`, exactly as the scheduler's synchronous read used to.
"""
from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass

import torch

from ..api.params import SamplingParams
from ..engine.block_manager import BlockManager
from ..engine.kv_cache import PagedKVCache
from ..engine.sequence import WARM_REQUEST_ID, Sequence
from .entry import BlockKey
from .loader import PRIORITY_TURN, PRIORITY_WARM, EntryLoader, ReadJob

IDLE_WAIT_S = 0.01  # an engine with only reads in flight sleeps at most this long before it looks again


@dataclass(frozen=True, slots=True)
class DiskReads:
    """What a sequence's reads gave: blocks start_block.. start_block + num_blocks were matched on disk, the
    first num_loaded of them verified and are (or were) resident."""

    start_block: int
    num_blocks: int
    num_loaded: int

    def num_disk_tokens(self, num_cached_blocks: int, block_size: int) -> int:
        """Of a lookup that reused num_cached_blocks, the tokens that came from these reads."""
        return min(max(num_cached_blocks - self.start_block, 0), self.num_loaded) * block_size


@dataclass(eq=False, slots=True)
class _InFlight:
    job: ReadJob
    holder: Sequence
    start_block: int
    num_loaded: int = 0


def block_key(seq: Sequence, i: int, block_size: int) -> BlockKey:
    parent = seq.block_hashes[i - 1] if i else None
    return BlockKey(seq.block_hashes[i], parent, tuple(seq.token_ids[i * block_size : (i + 1) * block_size]))


class DiskPrefetch:
    def __init__(self, loader: EntryLoader, kv_cache: PagedKVCache, block_manager: BlockManager) -> None:
        self.loader = loader
        self.kv_cache = kv_cache
        self.block_manager = block_manager
        self._in_flight: dict[Sequence, _InFlight] = {}  # insertion order: the newest last
        self._done: dict[Sequence, DiskReads] = {}

    def start(self, seq: Sequence, cached_ids: Seq[int], num_blocks: int) -> None:
        """Read seq's blocks len(cached_ids) .. + num_blocks (matched on disk; seq.block_hashes current); a
        submitted turn's reads go before those of chats warmed on focus."""
        assert seq not in self._in_flight and num_blocks > 0
        self._done.pop(seq, None)
        bs, start = self.block_manager.block_size, len(cached_ids)
        end = start + num_blocks
        holder = Sequence(WARM_REQUEST_ID, seq.token_ids[: end * bs], end * bs, SamplingParams(max_tokens=1))
        holder.block_hashes = list(seq.block_hashes[:end])
        self.block_manager.allocate(holder, 0, cached_ids)  # the prefix stays resident while its tail is read
        priority = PRIORITY_WARM if seq.is_warm else PRIORITY_TURN
        job = self.loader.submit([block_key(seq, i, bs) for i in range(start, end)], priority)
        self._in_flight[seq] = _InFlight(job, holder, start)

    def pending(self, seq: Sequence) -> bool:
        return seq in self._in_flight

    @property
    def has_pending(self) -> bool:
        return bool(self._in_flight)

    def result(self, seq: Sequence) -> DiskReads | None:
        """seq's finished reads (kept until `forget`); None while they are in flight or when it had none."""
        return self._done.get(seq)

    def reads_any(self, seq: Sequence, hashes: set[bytes]) -> bool:
        """Whether seq's reads in flight include one of these blocks."""
        flight = self._in_flight.get(seq)
        return flight is not None and any(k.block_hash in hashes for k in flight.job.keys)

    def forget(self, seq: Sequence) -> None:
        self._done.pop(seq, None)

    def drop(self, seq: Sequence) -> None:
        """seq is done with (finished, cancelled): its reads not yet made are dropped, its holder lets go."""
        flight = self._in_flight.pop(seq, None)
        if flight is not None:
            self.loader.cancel(flight.job)
            self.block_manager.deallocate(flight.holder)
        self._done.pop(seq, None)

    def copy_arrived(self) -> None:
        """Engine thread, between steps: copy the payloads that arrived into their blocks (cheap: a memcpy each)."""
        for seq, flight in list(self._in_flight.items()):
            payloads, stopped = self.loader.take(flight.job)
            for payload in payloads:
                if not self._copy(flight, payload):  # no free block left: the rest is computed
                    self.loader.cancel(flight.job)
                    stopped = True
                    break
            if stopped:
                self._stop(seq)

    def release_newest(self) -> bool:
        """A running sequence needs the blocks: the newest reads in flight stop here (what they read stays
        cached-free). False when none is in flight."""
        if not self._in_flight:
            return False
        seq = next(reversed(self._in_flight))
        self.loader.cancel(self._in_flight[seq].job)
        self._stop(seq)
        return True

    def wait(self) -> None:
        """Nothing to compute, reads in flight: sleep until a payload arrives (at most IDLE_WAIT_S)."""
        self.loader.wait(IDLE_WAIT_S)

    def close(self) -> None:
        for seq in list(self._in_flight):
            self.drop(seq)
        self.loader.close()

    def _copy(self, flight: _InFlight, payload: memoryview) -> bool:
        bm, holder = self.block_manager, flight.holder
        if not bm.allocate(holder, bm.block_size):
            return False
        data = torch.frombuffer(payload, dtype=self.kv_cache.k[0].dtype).view(self.kv_cache.block_shape)
        self.kv_cache.write_block(holder.block_table[-1], data)
        holder.num_computed_tokens += bm.block_size
        bm.cache_full_blocks(holder)  # shareable (and on the block map) at once
        flight.num_loaded += 1
        return True

    def _stop(self, seq: Sequence) -> None:
        flight = self._in_flight.pop(seq)
        self.block_manager.deallocate(flight.holder)
        self._done[seq] = DiskReads(flight.start_block, len(flight.job.keys), flight.num_loaded)
