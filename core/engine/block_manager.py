"""The KV block pool: which block holds which tokens, who shares it, and what may be evicted.

Every block is in exactly one state:
- used: ref_count > 0, in some sequence's block table;
- cached-free: ref_count 0 but holding the KV of a hashed full block, kept in an LRU (oldest first)
  and revived in O(1) on a prefix hit, evicted only when a new block is needed;
- empty: ref_count 0, no hash.
A pinned hash (pin(), within pin_budget_blocks) rests in pinned_free instead of the LRU when its block is
released: evicted only after every unpinned cached-free block is gone; unpin() returns it to the LRU.
Full blocks are hashed as a chain: hash(parent hash, fingerprint, block token ids). A hit also compares
the block's stored token ids and parent hash (each parent verified the same way before it), so a hash
collision can never serve KV computed after a different prefix.
"""
from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from .eviction_log import EvictionLog
from .sequence import Sequence

ROOT_HASH = b"llmchat-kv-root"


def hash_block(parent: bytes | None, token_ids: Seq[int], fingerprint: bytes) -> bytes:
    """Chained block hash: stable across runs (the disk tier keys on it)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(parent or ROOT_HASH)
    h.update(fingerprint)
    h.update(array("q", token_ids).tobytes())
    return h.digest()


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: bytes | None = None
    token_ids: tuple[int, ...] = ()  # the tokens whose KV it holds, set when the block is hashed
    parent_hash: bytes | None = None  # the hash of the block before it in its chain (None: the first block)


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True, fingerprint: bytes = b"",
                 pin_budget_blocks: int | None = None):
        assert num_blocks > 0 and block_size > 0
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.fingerprint = fingerprint
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.empty_ids: list[int] = list(range(num_blocks - 1, -1, -1))  # a stack: pop() gives the lowest id
        self.cached_free: OrderedDict[int, None] = OrderedDict()  # LRU: first = evicted first
        self.hash_to_block: dict[bytes, int] = {}
        self.num_evictions = 0
        self.evictions = EvictionLog(4 * num_blocks)  # hash -> when it was evicted (the cache explainer asks)
        self.pin_budget_blocks = num_blocks // 4 if pin_budget_blocks is None else pin_budget_blocks
        self.pinned_hashes: set[bytes] = set()
        self.pinned_free: OrderedDict[int, None] = OrderedDict()  # cached-free blocks kept out of the LRU

    # -- counts -----------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks a new allocation can take (empty + cached-free)."""
        return len(self.empty_ids) + len(self.cached_free) + len(self.pinned_free)

    @property
    def num_cached_free_blocks(self) -> int:
        return len(self.cached_free) + len(self.pinned_free)

    @property
    def num_empty_blocks(self) -> int:
        return len(self.empty_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- hashing and lookup -----------------------------------------------------------------
    def update_block_hashes(self, seq: Sequence) -> None:
        """Extend seq.block_hashes over every full block of seq.token_ids (incremental)."""
        bs = self.block_size
        for i in range(len(seq.block_hashes), seq.num_tokens // bs):
            parent = seq.block_hashes[i - 1] if i else None
            seq.block_hashes.append(hash_block(parent, seq.token_ids[i * bs : (i + 1) * bs], self.fingerprint))

    def lookup(self, seq: Sequence) -> list[int]:
        """Block ids of the longest cached prefix of seq, at most num_tokens - 1 tokens (the last is computed)."""
        if not self.enable_prefix_caching or not seq.use_prefix_cache:
            return []
        self.update_block_hashes(seq)
        return self._cached_chain(seq.token_ids, seq.block_hashes, (seq.num_tokens - 1) // self.block_size)

    def resident_chain(self, hashes: Seq[bytes]) -> list[int]:
        """Block ids still holding the leading blocks of a hash chain (for the UI's per-chat breakdown)."""
        hits: list[int] = []
        for i, h in enumerate(hashes):
            block_id = self.hash_to_block.get(h)
            if block_id is None or self.blocks[block_id].parent_hash != (hashes[i - 1] if i else None):
                break
            hits.append(block_id)
        return hits

    def _cached_chain(self, token_ids: Seq[int], hashes: list[bytes], max_blocks: int) -> list[int]:
        bs = self.block_size
        hits: list[int] = []
        for i in range(max_blocks):
            block_id = self.hash_to_block.get(hashes[i])
            if block_id is None:
                break
            block = self.blocks[block_id]  # verify, so that a hash collision can never serve the wrong KV
            parent = hashes[i - 1] if i else None
            if block.parent_hash != parent or block.token_ids != tuple(token_ids[i * bs : (i + 1) * bs]):
                break
            hits.append(block_id)
        return hits

    # -- allocation -------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, num_new_tokens: int, cached_ids: Seq[int] = (), num_loaded_blocks: int = 0) -> bool:
        num_hit_blocks = len(cached_ids) + num_loaded_blocks
        num_computed = num_hit_blocks * self.block_size if num_hit_blocks else seq.num_computed_tokens  # as allocate sets it
        needed = self.num_blocks_for(num_computed + num_new_tokens) - len(seq.block_table) - len(cached_ids)
        revived = sum(1 for b in cached_ids if self.blocks[b].ref_count == 0)  # they leave the free pool
        return needed <= self.num_free_blocks - revived

    def allocate(self, seq: Sequence, num_new_tokens: int, cached_ids: Seq[int] = (), num_loaded_blocks: int = 0) -> bool:
        """Grow seq.block_table to hold num_computed_tokens + num_new_tokens; cached_ids (from lookup) are
        shared first and count as computed; then num_loaded_blocks fresh blocks that the caller fills from the
        disk tier count as computed too (if a load fails, the caller lowers num_computed_tokens). Returns False,
        changing nothing, when blocks are short."""
        if not self.can_allocate(seq, num_new_tokens, cached_ids, num_loaded_blocks):
            return False
        if cached_ids or num_loaded_blocks:
            assert not seq.block_table and seq.num_computed_tokens == 0, "prefix hits only for a fresh sequence"
            for block_id in cached_ids:
                self._touch(block_id)
            seq.block_table.extend(cached_ids)
            seq.num_computed_tokens = (len(cached_ids) + num_loaded_blocks) * self.block_size
        needed = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        for _ in range(needed):
            seq.block_table.append(self._take_block())
        return True

    def deallocate(self, seq: Sequence) -> None:
        """Release seq's blocks, last block first, so the tail of a chain is evicted before its head."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            assert block.ref_count > 0
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.block_hash in self.pinned_hashes:
                    self.pinned_free[block_id] = None
                elif block.block_hash is not None:
                    self.cached_free[block_id] = None
                else:
                    self.empty_ids.append(block_id)
        seq.block_table.clear()
        seq.num_computed_tokens = 0

    def free_tail(self, seq: Sequence, num_tokens: int) -> None:
        """Release seq's blocks past those holding its first num_tokens tokens (slots of rejected speculative
        tokens). They were taken for this sequence alone and never hashed: nothing cached is touched."""
        while len(seq.block_table) > self.num_blocks_for(num_tokens):
            block = self.blocks[seq.block_table.pop()]
            assert block.ref_count == 1 and block.block_hash is None
            block.ref_count = 0
            self.empty_ids.append(block.block_id)

    def cache_full_blocks(self, seq: Sequence) -> list[int]:
        """Register the hashes of seq's full, computed blocks so later requests can reuse them; returns the ids
        of the blocks newly registered (for the disk tier)."""
        if not self.enable_prefix_caching or not seq.use_prefix_cache:
            return []
        self.update_block_hashes(seq)
        bs = self.block_size
        registered: list[int] = []
        for i in range(min(seq.num_computed_tokens // bs, len(seq.block_table))):
            block = self.blocks[seq.block_table[i]]
            if block.block_hash is not None:
                continue
            block_hash = seq.block_hashes[i]
            if block_hash in self.hash_to_block:  # same content already cached in another block: keep that one
                continue
            block.block_hash = block_hash
            block.token_ids = tuple(seq.token_ids[i * bs : (i + 1) * bs])
            block.parent_hash = seq.block_hashes[i - 1] if i else None
            self.hash_to_block[block_hash] = block.block_id
            registered.append(block.block_id)
        return registered

    def reset_prefix_cache(self) -> None:
        """Forget every cached-free block (used blocks keep their hashes)."""
        self.cached_free.update(self.pinned_free)
        self.pinned_free.clear()
        while self.cached_free:
            block_id, _ = self.cached_free.popitem(last=False)
            self._forget(self.blocks[block_id])
            self.empty_ids.append(block_id)

    # -- pinning ----------------------------------------------------------------------------
    def pin(self, hashes: Seq[bytes]) -> int:
        """Keep the blocks of these hashes (a chat's chain, head first) out of LRU eviction, as many as the budget
        allows; returns how many of them are pinned now."""
        num_pinned = 0
        for h in hashes:
            if h not in self.pinned_hashes:
                if len(self.pinned_hashes) >= self.pin_budget_blocks:
                    break
                self.pinned_hashes.add(h)
                block_id = self.hash_to_block.get(h)
                if block_id is not None and block_id in self.cached_free:
                    del self.cached_free[block_id]
                    self.pinned_free[block_id] = None
            num_pinned += 1
        return num_pinned

    def unpin(self, hashes: Seq[bytes]) -> None:
        """Return these hashes' blocks to the LRU (as the most recently used)."""
        for h in hashes:
            self.pinned_hashes.discard(h)
            block_id = self.hash_to_block.get(h)
            if block_id is not None and block_id in self.pinned_free:
                del self.pinned_free[block_id]
                self.cached_free[block_id] = None

    def is_pinned(self, block_id: int) -> bool:
        return self.blocks[block_id].block_hash in self.pinned_hashes

    # -- internals --------------------------------------------------------------------------
    def _touch(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:  # O(1) revive
            if block_id in self.pinned_free:
                del self.pinned_free[block_id]
            else:
                del self.cached_free[block_id]
        block.ref_count += 1

    def _take_block(self) -> int:
        if self.empty_ids:
            block_id = self.empty_ids.pop()
        else:  # evict the least recently used, a pinned block only when nothing else is left
            block_id, _ = (self.cached_free or self.pinned_free).popitem(last=False)
            self.evictions.record(self.blocks[block_id].block_hash)
            self._forget(self.blocks[block_id])
            self.num_evictions += 1
        block = self.blocks[block_id]
        assert block.ref_count == 0 and block.block_hash is None
        block.ref_count = 1
        return block_id

    def _forget(self, block: Block) -> None:
        assert block.block_hash is not None and self.hash_to_block.get(block.block_hash) == block.block_id
        del self.hash_to_block[block.block_hash]
        block.block_hash, block.token_ids, block.parent_hash = None, (), None

    def check_invariants(self) -> None:
        """For tests: every block in exactly one state, counts add up, the hash map matches the blocks."""
        empty, cached = set(self.empty_ids), set(self.cached_free) | set(self.pinned_free)
        assert len(empty) == len(self.empty_ids) and not (empty & cached)
        assert not set(self.cached_free) & set(self.pinned_free)
        assert all(self.blocks[b].block_hash in self.pinned_hashes for b in self.pinned_free)
        assert len(self.pinned_hashes) <= self.pin_budget_blocks
        for block in self.blocks:
            assert block.ref_count >= 0
            in_free = block.block_id in empty or block.block_id in cached
            assert in_free == (block.ref_count == 0), block
            if block.block_id in empty:
                assert block.block_hash is None
            if block.block_id in cached:
                assert block.block_hash is not None
            if block.block_hash is not None:
                assert self.hash_to_block[block.block_hash] == block.block_id
                assert len(block.token_ids) == self.block_size
        assert len(self.hash_to_block) == sum(b.block_hash is not None for b in self.blocks)
        assert self.num_used_blocks + self.num_cached_free_blocks + self.num_empty_blocks == self.num_blocks
