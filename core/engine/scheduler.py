"""Which tokens of which sequences the next step computes.

There is no prefill phase or decode phase: every sequence has num_computed_tokens catching up to
num_tokens within a per-step token budget (vLLM v1's idea). Running sequences go first, so decodes
are never starved by a long prompt; a long prompt is prefilled in chunks over several steps. When KV
blocks run out, the newest running sequence is preempted (its blocks freed, recomputed later).

A request whose prompt has blocks in the disk tier waits while they are read on the loader thread
(core/kvdisk/prefetch.py, started when it is added); the sequences behind it and the running ones go on,
and the step never waits for the disk. Once its reads stop, its lookup finds them resident.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Any, Protocol

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


class ReadsAhead(Protocol):
    """A lower tier's reads off the engine step (core/kvdisk/prefetch.py DiskPrefetch)."""

    has_pending: bool

    def start(self, seq: Sequence, cached_ids: Seq[int], num_blocks: int) -> None: ...
    def pending(self, seq: Sequence) -> bool: ...
    def result(self, seq: Sequence) -> Any: ...  # DiskReads | None
    def forget(self, seq: Sequence) -> None: ...
    def drop(self, seq: Sequence) -> None: ...
    def copy_arrived(self) -> None: ...
    def release_newest(self) -> bool: ...


class PrefixTier(Protocol):
    """A lower tier of the prefix cache (the disk tier, core/kvdisk/tier.py), looked up after resident blocks:
    `match` finds its entries (no I/O), `prefetch` reads them on its own thread."""

    prefetch: ReadsAhead

    def match(self, seq: Sequence, start_block: int, max_blocks: int) -> int: ...


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
        self.warming = Warming(block_manager, lambda: self.lower_tier)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)
        if (tier := self._tier_for(seq)) is not None:
            tier.prefetch.copy_arrived()  # what a chat warmed on focus has read so far is resident...
            self.warming.drop_reads(set(seq.block_hashes[len(self.block_manager.lookup(seq)):]))  # ... and the
            self._start_reads(tier, seq)  # reads of the blocks this turn would read too let go: it reads them first

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
        if self.lower_tier is not None:
            self.lower_tier.prefetch.copy_arrived()  # the disk payloads read since the last step
            self.warming.start_reads()  # a chat just opened: its reads start now, whatever else runs
        if self.waiting or self.running:
            self.warming.pause_all()  # requests first: a paused draft holds no block (its full ones stay cached)

        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens + len(seq.draft_ids) - seq.num_computed_tokens, budget)
            if seq.draft_ids and not bm.can_allocate(seq, n):  # drafted tokens never preempt anyone
                n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            while not bm.allocate(seq, n):
                if self.lower_tier is not None and self.lower_tier.prefetch.release_newest():
                    continue  # reads in flight let go of their blocks before anyone running is preempted
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

        i = 0
        while i < len(self.waiting) and budget > 0 and not preempted and len(self.running) < self.max_num_seqs:
            seq = self.waiting[i]
            tier = self._tier_for(seq)
            reads = tier.prefetch.result(seq) if tier is not None else None
            if tier is not None and (tier.prefetch.pending(seq) or reads is None and self._start_reads(tier, seq)):
                i += 1  # its disk reads are in flight: the sequences behind it go on
                continue
            cached = bm.lookup(seq)
            n = min(seq.num_tokens - len(cached) * bm.block_size, budget)
            if not bm.allocate(seq, n, cached):
                if not self.running and not seqs and not self._reads_pending():
                    self.finish(seq, FinishReason.LENGTH)  # an empty cache cannot hold it: refuse, not wait forever
                    dropped.append(seq)
                    continue
                break
            if reads is not None:
                tier.prefetch.forget(seq)
                if seq.num_cached_tokens < 0:
                    seq.num_disk_tokens = reads.num_disk_tokens(len(cached), bm.block_size)
                    seq.num_disk_failed_blocks = reads.num_blocks - reads.num_loaded
            if seq.num_cached_tokens < 0:
                seq.num_cached_tokens = min(seq.num_computed_tokens, seq.num_prompt_tokens)
                seq.num_disk_tokens = min(seq.num_disk_tokens, seq.num_cached_tokens)
                self.lookups.append((seq.num_prompt_tokens, seq.num_cached_tokens, seq.num_disk_tokens))
            del self.waiting[i]
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            seqs.append(seq)
            num_new.append(n)
            budget -= n
        if not seqs and not self.running and not self.waiting and (chunk := self.warming.next_chunk(budget)):
            seqs.append(chunk[0])
            num_new.append(chunk[1])
        return ScheduledBatch(seqs, num_new), dropped

    def _tier_for(self, seq: Sequence) -> PrefixTier | None:
        usable = self.block_manager.enable_prefix_caching and seq.use_prefix_cache
        return self.lower_tier if usable else None

    def _start_reads(self, tier: PrefixTier, seq: Sequence) -> bool:
        """Queue the reads of seq's next blocks on disk (after its resident ones); False when there are none."""
        bm = self.block_manager
        cached = bm.lookup(seq)
        num_on_disk = tier.match(seq, len(cached), (seq.num_tokens - 1) // bm.block_size)
        if num_on_disk:
            tier.prefetch.start(seq, cached, num_on_disk)
        return num_on_disk > 0

    def _reads_pending(self) -> bool:
        return self.lower_tier is not None and self.lower_tier.prefetch.has_pending

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
        if self.lower_tier is not None:
            self.lower_tier.prefetch.drop(seq)  # a cancelled request's pending reads are dropped
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
