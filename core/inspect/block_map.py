"""A snapshot of every block of the paged KV cache, for the block map screen.

Taken on the engine thread between steps (EngineService.block_map), together with the EngineStats of the
same moment, so its counts and the panels' counts agree. Per block: its state (used / cached-free / free),
refcount, the conversations holding it (their cached prefix or their reply in flight) and, for cached-free
blocks, their place in the LRU (0 = evicted first). Per conversation: how many blocks it holds, how many
of them another conversation holds too, the LRU rank of its first block to go, and how many blocks of its
prefix are left only in the disk tier.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..engine.block_manager import BlockManager
from ..api.metrics import EngineStats, PrefixTiers

STATES = ("used", "cached", "free")


class BlockCell(NamedTuple):  # (a tuple, immutable and ~3x cheaper to build than a frozen dataclass)
    block_id: int
    state: str  # one of STATES
    ref_count: int  # requests in flight sharing it
    holders: tuple[Hashable, ...]  # conversations whose cached prefix or reply in flight it holds
    lru_rank: int | None  # cached-free blocks: 0 is evicted first; None otherwise
    pinned: bool = False  # its hash is pinned: evicted only after every unpinned cached-free block


@dataclass(frozen=True, slots=True)
class ChatBlocks:
    tag: Hashable
    num_blocks: int
    num_shared: int  # of them, held by another conversation too
    num_in_use: int  # of them, used by a request in flight (refcount > 0)
    next_eviction_rank: int | None  # the LRU rank of its first cached-free block (None: none is evictable)
    num_disk_only: int = 0  # blocks of its prefix no longer resident but still in the disk tier


@dataclass(frozen=True, slots=True)
class BlockMap:
    cells: tuple[BlockCell, ...]
    chats: tuple[ChatBlocks, ...]  # the conversation that loses its prefix first comes first
    block_size: int
    stats: EngineStats  # taken at the same moment

    def count(self, state: str) -> int:
        return sum(1 for c in self.cells if c.state == state)

    @property
    def num_shared(self) -> int:
        return sum(1 for c in self.cells if len(c.holders) > 1 or c.ref_count > 1)


def block_map_of(bm: BlockManager, residency: Mapping[Hashable, Sequence[int]], stats: EngineStats,
                 tiers: Mapping[Hashable, PrefixTiers] | None = None) -> BlockMap:
    """`tiers` (EngineService passes the engine's prefix_tiers()): per conversation, its blocks on disk only."""
    tiers = tiers or {}
    holders: dict[int, list[Hashable]] = {}
    for tag, block_ids in residency.items():
        for block_id in block_ids:
            holders.setdefault(block_id, []).append(tag)
    rank = {block_id: i for i, block_id in enumerate([*bm.cached_free, *bm.pinned_free])}  # pinned go last
    empty = set(bm.empty_ids)
    no_holders: tuple = ()
    cells = tuple([
        BlockCell(i, "used" if b.ref_count else ("free" if i in empty else "cached"), b.ref_count,
                  tuple(holders[i]) if i in holders else no_holders, rank.get(i),
                  b.block_hash is not None and b.block_hash in bm.pinned_hashes)
        for i, b in enumerate(bm.blocks)
    ])
    chats = []
    for tag, block_ids in residency.items():
        mine = [cells[i] for i in block_ids]
        ranks = [c.lru_rank for c in mine if c.lru_rank is not None]
        chats.append(ChatBlocks(tag, len(mine), sum(1 for c in mine if len(c.holders) > 1),
                                sum(1 for c in mine if c.ref_count), min(ranks) if ranks else None,
                                tiers[tag].num_disk_only if tag in tiers else 0))
    chats.sort(key=lambda c: (c.next_eviction_rank is None, c.next_eviction_rank or 0))
    return BlockMap(cells, tuple(chats), bm.block_size, stats)
