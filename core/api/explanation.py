"""The records that say why a prompt reused the KV it did (made by core/engine/cache_explainer.py).

What a client says about a prompt (`PromptContext`), what the engine remembers of a conversation's
previous request (`PriorTurn`) and the answer (`CacheExplanation`); the causes are listed in
core/engine/cache_explainer.py, the UI formats them (tui/text/cache_text.py).
"""
from __future__ import annotations

from dataclasses import dataclass

CAUSES = ("cache-off", "model", "system-prompt", "reasoning", "template", "disk-corrupt", "evicted", "disk-miss", "not-cached",
          "partial-block", "new-text")
DISK = ("off", "unused", "hit", "miss", "corrupt")  # the disk tier's part in the lookup


@dataclass(frozen=True, slots=True)
class PromptContext:
    """What a client says about a prompt, so that a miss can be explained (all optional)."""

    kept_ids: tuple[int, ...] = ()  # the ids the conversation already fed and got back (expected cached)
    system_prompt: str | None = None  # None: the model's default
    has_system_prompt: bool = False  # False: the client did not say (a raw-ids request)


@dataclass(frozen=True, slots=True)
class PriorTurn:
    """What the engine remembers of a conversation's previous request."""

    token_ids: tuple[int, ...]  # its prompt + output
    system_prompt: str | None
    has_system_prompt: bool
    fingerprint: bytes  # the model fingerprint its KV was computed with
    finished_at: float  # perf_counter clock


@dataclass(frozen=True, slots=True)
class CacheExplanation:
    cause: str  # one of CAUSES
    num_prompt_tokens: int
    num_cached_tokens: int  # where reuse ended: positions [0, num_cached_tokens) came from the cache
    num_known_tokens: int  # leading prompt tokens this chat had fed before (their KV was computed once)
    num_recomputed_tokens: int  # known tokens computed again: the partial block, evicted or lost blocks
    block_size: int
    divergence: int | None = None  # first prompt position that differs from the chat's earlier ids
    earlier_token: str | None = None  # the token there in the chat's earlier ids
    prompt_token: str | None = None  # the token there in this prompt
    num_evicted_blocks: int = 0  # of the known blocks after the reused prefix, how many were LRU-evicted
    evicted_seconds_ago: float | None = None  # since the first of them was evicted
    num_preemptions: int = 0  # this request was preempted (its KV freed and recomputed) this many times
    num_disk_tokens: int = 0  # of num_cached_tokens, how many the disk tier supplied
    disk: str = "off"  # one of DISK: off (no tier), unused, hit (some reuse came from disk), miss, corrupt
    # cause "reasoning": the template left out the earlier reply's reasoning block (this many of the chat's ids),
    # so the tokens the chat had after it (that reply's answer, this many) are prefilled again
    num_dropped_reasoning_tokens: int = 0
    num_reprefilled_tokens: int = 0

    @property
    def num_new_tokens(self) -> int:
        """Prompt tokens this chat had never fed (the message, the template's tail)."""
        return self.num_prompt_tokens - self.num_known_tokens
