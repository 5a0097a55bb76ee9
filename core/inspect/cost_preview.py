"""What sending the draft would cost, before it is sent (issue 27 item 4): tokenize the next prompt, look its
block hashes up in the paged cache and the disk tier, and price the rest at the prefill rate measured over the
engine's recent prefill steps. No compute: a hash lookup, on the engine thread (EngineService.preview_cost).

The count is the scheduler's: full blocks of the prompt's first num_tokens - 1 tokens (the last is always
computed), resident first, then those the disk tier would load. Blocks may be evicted before Enter, so it is a
preview, not a promise; the reuse explainer reports what happened.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..engine.block_manager import hash_block


@dataclass(frozen=True, slots=True)
class CostPreview:
    num_prompt_tokens: int
    num_resident_tokens: int  # reused from the paged cache
    num_disk_tokens: int  # read back from the disk tier
    prefill_rate: float  # prompt tokens per second over recent prefill steps (0.0: none measured yet)
    num_warming_target: int = 0  # the tokens a draft prefill in flight will have ready (0: none in flight)

    @property
    def num_reused_tokens(self) -> int:
        return self.num_resident_tokens + self.num_disk_tokens

    @property
    def num_prefill_tokens(self) -> int:
        return self.num_prompt_tokens - self.num_reused_tokens

    @property
    def seconds(self) -> float:
        """The prefill's estimated time (NaN until a prefill was measured)."""
        return self.num_prefill_tokens / self.prefill_rate if self.prefill_rate > 0 else math.nan

    def text(self) -> str:
        """One line for under the input box: `will reuse 3,968 · prefill 112 · ~0.4 s`."""
        reuse = f"will reuse {self.num_reused_tokens:,}"
        if self.num_disk_tokens:
            reuse += f" ({self.num_disk_tokens:,} from disk)"
        cost = f"~{self.seconds:.1f} s" if self.seconds == self.seconds else "time not measured yet"
        line = f"{reuse} · prefill {self.num_prefill_tokens:,} · {cost}"
        if self.warming:
            line = f"ready: {self.num_resident_tokens:,} of {self.num_warming_target:,} tokens · " + line
        return line

    @property
    def warming(self) -> bool:
        """A draft prefill is in flight (it has not reached its target yet)."""
        return self.num_warming_target > self.num_resident_tokens


ROOM_LINE_FRACTION = 0.8  # past this share of the context, the room left is shown (issue 27 item 5)


def room_left_text(num_tokens: int, context: int | None) -> str | None:
    """`1,234 of 8,192 tokens of context left` once `num_tokens` passes 80% of the context; None before (or
    when the context is unknown)."""
    if not context or num_tokens <= ROOM_LINE_FRACTION * context:
        return None
    if num_tokens >= context:
        over = num_tokens - context + 1
        return f"{over:,} token{'s' if over != 1 else ''} over the {context:,}-token context: this turn will not fit"
    return f"{context - num_tokens:,} of {context:,} tokens of context left"


def preview_cost(engine: Any, prompt_ids: list[int], tag: Any = None) -> CostPreview:
    """The CostPreview of submitting `prompt_ids` to `engine` (an LLMEngine) now; `tag`'s draft prefill in flight,
    if any, is counted in."""
    manager = engine.block_manager
    size, num_tokens = manager.block_size, len(prompt_ids)
    hashes: list[bytes] = []
    if manager.enable_prefix_caching:
        for i in range(max(0, num_tokens - 1) // size):
            hashes.append(hash_block(hashes[-1] if hashes else None, prompt_ids[i * size:(i + 1) * size],
                                     manager.fingerprint))
    num_resident = len(manager.resident_chain(hashes))
    disk = engine.kv_disk
    num_disk = 0  # the scheduler loads the run of blocks on disk that follows the resident ones
    while disk is not None and num_resident + num_disk < len(hashes) and disk.count_on_disk(
            [hashes[num_resident + num_disk]]):
        num_disk += 1
    progress = engine.scheduler.warming.progress(tag) if tag is not None else None
    target = progress[1] if progress else 0
    return CostPreview(num_tokens, num_resident * size, num_disk * size, engine.window.prefill_rate(), target)
