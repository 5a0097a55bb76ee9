"""Prefill while the user types (issue 27 item 1): the draft's prompt, up to the blocks its turn will reuse,
computed in the engine's idle steps so that Enter leaves only the tail.

A warm sequence is no request: no events, no sampling, no stream. Its token ids are the draft prompt's first
`target` tokens plus the next one, and it is never scheduled past `target`, so the runner never samples it;
once `target` tokens are computed, its full blocks are ordinary prefix-cache blocks (hash chain, disk tier
included) and it is let go. `target` is what a turn with this prompt looks up: (num_tokens - 1) // block_size
full blocks, the last token always computed by the turn itself.

Priority: a warm sequence runs only in a step with nothing else to do (no running or waiting request), so a
reply streaming in another chat keeps its TPOT exactly; a submitted turn lets every warm sequence go at once
(what they computed stays cached: the turn's lookup finds it). One per chat: a new draft replaces the
chat's old one, whose computed blocks the new one reuses where the text before the edit is unchanged.

Warm on focus (item 2) is the same with the chat's own ids: selecting a reopened chat warms what it already
said. The blocks the disk tier holds are read and verified on its loader thread (core/kvdisk/prefetch.py,
never inside an engine step), at once, even while other chats stream (`start_reads`), and copied into the
cache between steps as they arrive; what the disk does not hold is computed in idle steps once the reads
stop. A submitted turn that would read the same blocks lets the draft's reads go (what arrived stays
cached); the draft reads the rest again in a later idle step.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from ..api.params import SamplingParams
from .block_manager import BlockManager
from .sequence import WARM_REQUEST_ID, Sequence, SequenceStatus


class Warming:
    def __init__(self, block_manager: BlockManager, lower_tier: Callable[[], Any] = lambda: None) -> None:
        self.block_manager = block_manager
        self.lower_tier = lower_tier  # the disk tier now (None: none), with its reads ahead (`prefetch`)
        self.by_tag: OrderedDict[Hashable, tuple[Sequence, int]] = OrderedDict()  # tag -> (sequence, target)
        self._reads_tried: set[Sequence] = set()  # drafts whose disk reads start_reads already started (or found none)

    def start(self, tag: Hashable, prompt_ids: list[int]) -> int:
        """Warm `prompt_ids` for conversation `tag` (replacing its previous draft); the tokens it will have
        ready. 0: nothing to warm (prefix caching off, or a prompt shorter than one block and a token)."""
        bm = self.block_manager
        target = (len(prompt_ids) - 1) // bm.block_size * bm.block_size if bm.enable_prefix_caching else 0
        entry = self.by_tag.get(tag)
        if entry is not None and entry[0].token_ids == list(prompt_ids[: target + 1]):
            return target  # the same draft asked again (the preview polls): it goes on
        self.cancel(tag)
        if target <= 0 or target + 1 > bm.num_blocks * bm.block_size:
            return 0
        seq = Sequence(WARM_REQUEST_ID, list(prompt_ids[: target + 1]), target + 1, SamplingParams(max_tokens=1))
        self.by_tag[tag] = (seq, target)
        return target

    def cancel(self, tag: Hashable) -> None:
        entry = self.by_tag.pop(tag, None)
        if entry is not None:
            self._release(entry[0])

    def cancel_all(self) -> None:
        for tag in list(self.by_tag):
            self.cancel(tag)

    def start_reads(self) -> None:
        """Between any steps: a new draft's blocks on disk are read in the background (the loader thread), once;
        the draft's compute still waits for an idle step."""
        tier = self.lower_tier() if self.block_manager.enable_prefix_caching else None
        for seq, target in self.by_tag.values() if tier is not None else ():
            if seq in self._reads_tried or seq.status is not SequenceStatus.WAITING or tier.prefetch.pending(seq):
                continue
            self._reads_tried.add(seq)
            cached = self.block_manager.lookup(seq)
            if num_on_disk := tier.match(seq, len(cached), target // self.block_manager.block_size):
                tier.prefetch.start(seq, cached, num_on_disk)

    def drop_reads(self, hashes: set[bytes]) -> None:
        """Let go of the drafts' disk reads that include one of these blocks (a submitted turn reads them itself,
        first); what they copied in stays cached, each draft reads the rest in a later idle step."""
        tier = self.lower_tier()
        for seq, _ in self.by_tag.values() if tier is not None else ():
            if tier.prefetch.reads_any(seq, hashes):
                tier.prefetch.drop(seq)

    def pause_all(self) -> None:
        """Let go of every draft's blocks (a request needs the room); each looks its prefix up again later."""
        for seq, _ in self.by_tag.values():
            if seq.block_table:
                self.block_manager.deallocate(seq)
            seq.status = SequenceStatus.WAITING

    def progress(self, tag: Hashable) -> tuple[int, int] | None:
        """(tokens computed, target) of the chat's draft in flight; None when none is."""
        entry = self.by_tag.get(tag)
        return (max(entry[0].num_computed_tokens, 0), entry[1]) if entry else None

    def next_chunk(self, budget: int) -> tuple[Sequence, int] | None:
        """The oldest draft's next chunk (at most `budget` tokens), its blocks allocated; None when there is none
        or the cache has no room for it (then it is let go)."""
        bm, size = self.block_manager, self.block_manager.block_size
        while self.by_tag:
            tag, (seq, target) = next(iter(self.by_tag.items()))
            cached, tier = [], self.lower_tier() if bm.enable_prefix_caching else None
            if seq.status is SequenceStatus.WAITING:
                if tier is not None and tier.prefetch.pending(seq):
                    return None  # its disk reads are in flight: copied in between steps as they arrive
                cached = bm.lookup(seq)
                if tier is not None and tier.prefetch.result(seq) is None:
                    if num_on_disk := tier.match(seq, len(cached), target // size):
                        tier.prefetch.start(seq, cached, num_on_disk)  # read on the loader thread
                        return None
                if tier is not None:
                    tier.prefetch.forget(seq)
            start = len(cached) * size if cached else seq.num_computed_tokens
            n = max(0, min(target - start, budget))
            if n > 0 and bm.allocate(seq, n, cached):
                seq.status = SequenceStatus.RUNNING
                return seq, n
            self.cancel(tag)  # all in memory now, or no room: nothing more to do for it
        return None

    def settle(self, seq: Sequence) -> None:
        """After its chunk was computed (Scheduler.postprocess): a draft whose target is reached is let go."""
        for tag, (warm, target) in list(self.by_tag.items()):
            if warm is seq and seq.num_computed_tokens >= target:
                self.cancel(tag)

    def _release(self, seq: Sequence) -> None:
        self._reads_tried.discard(seq)
        if (tier := self.lower_tier()) is not None:
            tier.prefetch.drop(seq)
        if seq.block_table:
            self.block_manager.deallocate(seq)
        seq.status = SequenceStatus.FINISHED
