"""The engine service's calls that work ahead of the user (issue 27): price a draft and prefill it while it is
typed, warm a chat on focus, say where a chat's blocks are. A mixin of EngineService (core/backends/service.py):
each runs on the engine thread through its `_call`, between steps."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..inspect.context_map import block_tiers
from ..inspect.cost_preview import preview_cost
from ..text.prompt import prompt_ids_for

if TYPE_CHECKING:
    from ..engine.engine import LLMEngine


class CacheAheadCalls:
    _call: Callable[[Callable[["LLMEngine"], object]], Future]  # EngineService's

    def preview_cost(self, messages: list[dict], token_ids: list[int], conversation_id: int | None = None,
                     warm: bool = False) -> Future:
        """A CostPreview (core/inspect/cost_preview.py) of the turn `messages` (the draft last) would start:
        rendered and looked up on the engine thread, between steps. With `warm`, the engine also prefills
        that prompt in its idle steps for the conversation (core/engine/warming.py); the preview says how far."""
        messages, ids = [dict(m) for m in messages], list(token_ids)

        def run(engine: "LLMEngine"):
            prompt = prompt_ids_for(engine.tokenizer, messages, ids)
            if warm and conversation_id is not None:
                engine.warm(conversation_id, prompt)
            return preview_cost(engine, prompt, conversation_id)

        return self._call(run)

    def block_tiers(self, token_ids: list[int]) -> Future:
        """(block size, per full block of a chat's ids: "memory", "disk" or "gone"): core/inspect/context_map.py."""
        ids = list(token_ids)
        return self._call(lambda engine: (engine.block_manager.block_size, block_tiers(engine, ids)))

    def warm_chat(self, conversation_id: int, token_ids: list[int]) -> Future:
        """Warm a chat the user opened (core/engine/warming.py): what it already said is read back from the disk
        tier (or computed) in idle steps, so its next turn costs what a turn in memory costs; answers the tokens
        it will have ready."""
        ids = list(token_ids)
        return self._call(lambda engine: engine.warm(conversation_id, ids))
