"""What the engine remembers to explain each request's prefix reuse (core/engine/cache_explainer.py).

The engine owns one ReuseMemory: `expect` when a request is added (its conversation tag and what the
client said about the prompt), `admitted` at its first admission (right after the prefix lookup: the
explanation is made then), `remember` when it finishes (the conversation's PriorTurn for its next
request) and `pop` for the Finished event (with the request's preemptions).
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable

from .block_manager import BlockManager
from .cache_explainer import CacheExplanation, PriorTurn, PromptContext, explain_reuse
from ..api.metrics import now
from .sequence import Sequence


def _no(block_hash: bytes) -> bool:
    return False


class ReuseMemory:
    MAX_REMEMBERED = 256  # conversations whose previous request is remembered (oldest forgotten first)

    def __init__(self, block_manager: BlockManager, token_text: Callable[[int], str],
                 disk_tier: Callable[[], object] = lambda: None) -> None:
        self.block_manager = block_manager
        self.disk_tier = disk_tier  # the engine's disk tier now (core/kvdisk/tier.py KVDiskTier), or None
        self.token_text = token_text
        self.priors: OrderedDict[Hashable, PriorTurn] = OrderedDict()
        self._requests: dict[int, tuple[Hashable | None, PromptContext | None]] = {}
        self._explanations: dict[int, CacheExplanation] = {}

    def expect(self, request_id: int, tag: Hashable | None, context: PromptContext | None) -> None:
        self._requests[request_id] = (tag, context)

    def admitted(self, seq: Sequence) -> CacheExplanation:
        """At the first admission: why the lookup reused what it did."""
        tag, context = self._requests.get(seq.request_id, (None, None))
        bm = self.block_manager
        disk = self.disk_tier()
        explanation = explain_reuse(
            seq.token_ids[: seq.num_prompt_tokens], max(seq.num_cached_tokens, 0), bm.block_size,
            context=context, prior=self.priors.get(tag) if tag is not None else None, fingerprint=bm.fingerprint,
            caching=bm.enable_prefix_caching and seq.use_prefix_cache, block_hashes=seq.block_hashes,
            evicted_at=bm.evictions.evicted_at, now=now(), token_text=self.token_text,
            disk_on=disk is not None, num_disk_tokens=seq.num_disk_tokens,
            num_disk_failed_blocks=seq.num_disk_failed_blocks, on_disk=disk.store.contains if disk else _no,
        )
        self._explanations[seq.request_id] = explanation
        return explanation

    def remember(self, seq: Sequence) -> None:
        """The request finished: its ids become its conversation's PriorTurn."""
        tag, context = self._requests.pop(seq.request_id, (None, None))
        if tag is None or not seq.use_prefix_cache:
            return
        context = context or PromptContext()
        self.priors[tag] = PriorTurn(tuple(seq.token_ids), context.system_prompt, context.has_system_prompt,
                                     self.block_manager.fingerprint, now())
        self.priors.move_to_end(tag)
        while len(self.priors) > self.MAX_REMEMBERED:
            self.priors.popitem(last=False)

    def pop(self, seq: Sequence) -> CacheExplanation | None:
        """The request's explanation for its Finished event (None: it was never admitted)."""
        self._requests.pop(seq.request_id, None)
        explanation = self._explanations.pop(seq.request_id, None)
        if explanation is not None and seq.num_preemptions:
            explanation = dataclasses.replace(explanation, num_preemptions=seq.num_preemptions)
        return explanation
