"""What the engine tells its clients: text deltas, then one finish event per request.

This is the protocol the UI depends on (not the engine's internals); a remote backend can speak it too.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmchat.core.metrics import RequestMetrics
from llmchat.core.sequence import FinishReason


@dataclass(frozen=True, slots=True)
class TextDelta:
    request_id: int
    text: str  # complete UTF-8 text only; may be empty while a character or stop string is pending
    token_ids: tuple[int, ...]  # the tokens sampled this step


@dataclass(frozen=True, slots=True)
class Finished:
    request_id: int
    reason: FinishReason
    metrics: RequestMetrics
    output_ids: tuple[int, ...]  # every generated id, the end-of-turn token included
    text: str  # the whole reply as shown (stop string excluded)
    error: str | None = None  # why a request was refused (reason ERROR) or cut short


EngineEvent = TextDelta | Finished
