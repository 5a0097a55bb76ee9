"""What the engine tells its clients: started, text deltas, then exactly one finish event per request.

This is the protocol the UI depends on (not the engine's internals); a remote backend can speak it too.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .explanation import CacheExplanation
from .metrics import RequestMetrics


class FinishReason(str, enum.Enum):
    STOP = "stop"  # an end-of-turn token or a stop string
    LENGTH = "length"  # max_tokens, the model's context, or a KV cache too small to go on
    ABORT = "abort"  # cancelled by the user or by shutdown
    ERROR = "error"  # refused: empty, too long for the context, or larger than the whole KV cache


@dataclass(frozen=True, slots=True)
class Started:
    """The request's prompt was looked up in the prefix cache and its prefill began."""

    request_id: int
    prompt_ids: tuple[int, ...]  # exactly what the model is fed (the conversation keeps these ids)
    num_cached_tokens: int  # of them, how many came from the prefix cache
    num_disk_tokens: int = 0  # of those, how many the disk tier supplied
    reasoning_open: bool = False  # the prompt ends inside `<think>` (its generation prompt opened it): the
    # reply's text begins inside reasoning (core/text/reasoning.py)


@dataclass(frozen=True, slots=True)
class TextDelta:
    request_id: int
    text: str  # complete UTF-8 text only; may be empty while a character or stop string is pending
    token_ids: tuple[int, ...]  # the tokens sampled this step
    drafted: bool = False  # the token was drafted (speculative decoding) and the model kept it


@dataclass(frozen=True, slots=True)
class Finished:
    request_id: int
    reason: FinishReason
    metrics: RequestMetrics
    output_ids: tuple[int, ...]  # every generated id, the end-of-turn token included
    text: str  # the whole reply as shown (stop string excluded)
    error: str | None = None  # why a request was refused (reason ERROR) or cut short
    explanation: CacheExplanation | None = None  # where prefix reuse ended and why (None: never admitted)


EngineEvent = Started | TextDelta | Finished
