"""Which tokens of which sequences the next step computes.

There is no prefill phase or decode phase: every sequence has num_computed_tokens catching up to
num_tokens within a per-step token budget (vLLM v1's idea). Running sequences go first, so decodes
are never starved by a long prompt; a long prompt is prefilled in chunks over several steps. When KV
blocks run out, the newest running sequence is preempted (its blocks freed, recomputed later).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Protocol

from .block_manager import BlockManager
from .sequence import FinishReason, Sequence, SequenceStatus
from .warming import Warming


@dataclass(slots=True)
class ScheduledBatch:
    seqs: list[Sequence]
    num_new_tokens: list[int]  # per sequence: tokens computed this step, from seq.num_computed_tokens on
    # (past seq.num_tokens: its drafted tokens, seq.draft_ids, verified in the same forward)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.num_new_tokens)


class PrefixTier(Protocol):
    """A lower tier of the prefix cache (the disk tier, core/kvdisk/tier.py), looked up after resident blocks."""

    def match(self, seq: Sequence, start_block: int, max_blocks: int) -> int: ...

    def load(self, seq: Sequence, start_block: int, block_ids: Seq[int]) -> int: ...


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 lower_tier: PrefixTier | None = None):
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.lower_tier = lower_tier
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # oldest first; the last one is preempted first
        # (prompt tokens, cached tokens, of them from the lower tier) of first admissions, drained by the engine
        self.lookups: list[tuple[int, int, int]] = []
        # drafts prefilled while the user types, and chats warmed on focus, in otherwise idle steps
        self.warming = Warming(block_manager, lambda: self.lower_tier, self._load_from_lower_tier)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.warming.by_tag)

    def schedule(self) -> tuple[ScheduledBatch, list[Sequence]]:
        """The next step's batch, and the sequences that had to finish because the KV cache cannot hold them."""
        bm = self.block_manager
        budget = self.max_num_batched_tokens
        seqs: list[Sequence] = []
        num_new: list[int] = []
        dropped: list[Sequence] = []
        preempted = False
        if self.waiting or self.running:
            self.warming.pause_all()  # requests first: a paused draft holds no block (its full ones stay cached)

        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens + len(seq.draft_ids) - seq.num_computed_tokens, budget)
            if seq.draft_ids and not bm.can_allocate(seq, n):  # drafted tokens never preempt anyone
                n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            while not bm.allocate(seq, n):
                victim = self.running.pop()
                preempted = True
                if victim is seq:  # nothing newer to preempt
                    if i == 0:  # alone and still no room: it can never go on
                        self.finish(seq, FinishReason.LENGTH)
                        dropped.append(seq)
                    else:
                        self._preempt(seq)
                    break
                self._preempt(victim)
            else:
                seqs.append(seq)
                num_new.append(n)
                budget -= n
                i += 1

        while self.waiting and budget > 0 and not preempted and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = bm.lookup(seq)
            num_loaded = 0
            if self.lower_tier is not None and bm.enable_prefix_caching and seq.use_prefix_cache:
                num_loaded = self.lower_tier.match(seq, len(cached), (seq.num_tokens - 1) // bm.block_size)
            n = min(seq.num_tokens - (len(cached) + num_loaded) * bm.block_size, budget)
            if not bm.allocate(seq, n, cached, num_loaded):
                if not self.running and not seqs:  # an empty cache cannot hold it: refuse rather than wait forever
                    self.waiting.popleft()
                    self.finish(seq, FinishReason.LENGTH)
                    dropped.append(seq)
                    continue
                break
            if num_loaded:
                self._load_from_lower_tier(seq, len(cached), num_loaded)
            if seq.num_cached_tokens < 0:
                seq.num_cached_tokens = min(seq.num_computed_tokens, seq.num_prompt_tokens)
                seq.num_disk_tokens = min(seq.num_disk_tokens, seq.num_cached_tokens)
                self.lookups.append((seq.num_prompt_tokens, seq.num_cached_tokens, seq.num_disk_tokens))
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            seqs.append(seq)
            num_new.append(n)
            budget -= n
        if not seqs and not self.running and not self.waiting and (chunk := self.warming.next_chunk(budget)):
            seqs.append(chunk[0])
            num_new.append(chunk[1])
        return ScheduledBatch(seqs, num_new), dropped

    def _load_from_lower_tier(self, seq: Sequence, start_block: int, num_blocks: int) -> None:
        """Fill the blocks allocate() set aside; a load that stops early leaves the rest to be computed."""
        bs = self.block_manager.block_size
        loaded = self.lower_tier.load(seq, start_block, seq.block_table[start_block : start_block + num_blocks])
        seq.num_computed_tokens = (start_block + loaded) * bs
        if seq.num_cached_tokens < 0:
            seq.num_disk_tokens = loaded * bs
            seq.num_disk_failed_blocks = num_blocks - loaded
        self.block_manager.cache_full_blocks(seq)  # shareable at once (the step's other admissions may hit them)

    def postprocess(self, batch: ScheduledBatch) -> list[int]:
        """After the forward: the scheduled tokens are computed; cache the blocks they filled. Returns the ids of
        the blocks newly hashed (for the disk tier)."""
        registered: list[int] = []
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            seq.num_computed_tokens += n
            registered += self.block_manager.cache_full_blocks(seq)
            if seq.is_warm:
                self.warming.settle(seq)
        return registered

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        if seq.block_table:
            self.block_manager.deallocate(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.deallocate(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
