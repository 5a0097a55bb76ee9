"""The disk tier of the prefix cache, as the scheduler and the engine see it.

Lookup order: blocks resident in the paged cache first (core/engine/block_manager.py), then this tier, then
compute. `match` says how many of a sequence's next full blocks have an entry (an index lookup, no I/O);
`prefetch` (core/kvdisk/prefetch.py) has them read and verified on the loader thread (core/kvdisk/loader.py)
and copies each payload into a block between steps, stopping at the first that does not verify (the rest is
computed, as any miss); the engine step never waits for the disk. `save` copies blocks that
became full and hashed out of the paged cache (the only work on the engine thread) and queues them for the
writer thread (core/kvdisk/store.py).
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence as Seq
from pathlib import Path

from ..engine.block_manager import BlockManager
from ..engine.kv_cache import PagedKVCache
from .entry import BlockKey, BlockLayout
from .loader import EntryLoader
from .prefetch import DiskPrefetch
from .folder import default_kv_disk_dir
from ..api.metrics import DiskTierStats
from ..config import DEFAULT_KV_DISK_GB
from .owners import record_owner
from .store import KVDiskStore
from ..engine.sequence import Sequence

log = logging.getLogger(__name__)

SLOW_READ_S = 1.0  # an entry read slower than this: the disk is slow, reading it costs more than recomputing
SLOW_PAUSE_S = 60.0  # ... so the tier is not read again for this long (lookups miss; writes go on)
DEFAULT_KV_DISK_BYTES = int(DEFAULT_KV_DISK_GB * 1e9)  # 4 GB: ~5,400 blocks of SmolLM2-135M in fp32 (~87k tokens)


class SlowReads:
    """A slow read pauses the tier's reads (lookups miss) for SLOW_PAUSE_S, with one notice per process. Told by
    the loader thread; kept apart from the tier so that thread holds no reference to the KV cache."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paused_until = 0.0  # time.monotonic()
        self.notice: str | None = None  # the first slow read

    @staticmethod
    def is_slow(seconds: float) -> bool:
        return seconds > SLOW_READ_S

    @property
    def paused(self) -> bool:
        return time.monotonic() < self.paused_until

    def was_slow(self, seconds: float) -> None:
        self.paused_until = time.monotonic() + SLOW_PAUSE_S
        if self.notice is None:
            self.notice = f"a disk KV read took {seconds:.1f} s"
            log.warning("the disk tier at %s is slow (%s): prompts are computed instead of read for the next "
                        "%.0f s", self.root, self.notice, SLOW_PAUSE_S)


class KVDiskTier:
    def __init__(self, store: KVDiskStore, kv_cache: PagedKVCache, block_manager: BlockManager):
        self.store = store
        self.kv_cache = kv_cache
        self.block_manager = block_manager
        self.slow_reads = SlowReads(store.root)
        loader = EntryLoader(store, SlowReads.is_slow, self.slow_reads.was_slow)
        self.prefetch = DiskPrefetch(loader, kv_cache, block_manager)

    @classmethod
    def open(cls, root: Path, budget_bytes: int, kv_cache: PagedKVCache, block_manager: BlockManager,
             model_folder: str | None = None) -> "KVDiskTier":
        """`model_folder` (what the model was loaded from) is recorded as the owner of its blocks (`llmchat rm`)."""
        if model_folder is not None:
            record_owner(root, block_manager.fingerprint, model_folder)
        dtype = kv_cache.k[0].dtype
        shape = kv_cache.block_shape
        nbytes = kv_cache.bytes_per_block
        layout = BlockLayout(block_manager.fingerprint, str(dtype).removeprefix("torch."), shape, nbytes)
        return cls(KVDiskStore(root, layout, budget_bytes), kv_cache, block_manager)

    # -- the scheduler's side ---------------------------------------------------------------
    def match(self, seq: Sequence, start_block: int, max_blocks: int) -> int:
        """How many blocks from start_block on (below max_blocks) have an entry; seq.block_hashes must be current."""
        n = 0
        if self.slow_reads.paused:
            return 0
        for i in range(start_block, max_blocks):
            if not self.store.contains(seq.block_hashes[i], probe_disk=True):
                break
            n += 1
        return n

    # -- the engine's side ------------------------------------------------------------------
    def save(self, block_ids: Seq[int]) -> None:
        """Queue newly hashed blocks for writing (one copy each, here); known ones are only marked used."""
        blocks = [self.block_manager.blocks[b] for b in block_ids]
        new = []
        for block in blocks:
            if self.store.contains(block.block_hash):
                self.store.touch(block.block_hash)
            else:
                new.append(block)
        if not new:
            return
        data = self.kv_cache.read_blocks([b.block_id for b in new])
        for block, payload in zip(new, data):
            self.store.put(BlockKey(block.block_hash, block.parent_hash, block.token_ids), payload)

    def count_on_disk(self, hashes: Seq[bytes]) -> int:
        return self.store.count_known(hashes)

    def stats(self) -> DiskTierStats:
        return self.store.stats()

    def flush(self, timeout: float = 60.0) -> bool:
        return self.store.flush(timeout)

    def close(self) -> None:
        self.prefetch.close()
        self.store.close()


def kv_disk_root(path: str | os.PathLike | None) -> Path:
    return Path(path) if path else default_kv_disk_dir()
