"""Textual messages: how workers and the engine thread hand things to the UI (post_message is thread-safe)."""
from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass(slots=True)
class EngineInfo:
    """What the UI shows about the loaded model, read once when the engine is ready."""

    model_name: str
    device: str
    max_context: int
    load_seconds: float


class EngineProgress(Message):
    """A line of model-loading progress (fetching, converting, loading)."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line


class EngineReady(Message):
    def __init__(self, info: EngineInfo) -> None:
        super().__init__()
        self.info = info


class EngineFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class EngineEventsPending(Message):
    """The bridge holds engine events to drain; at most one of these is in the queue at a time."""


class PromptReady(Message):
    """A worker tokenized a turn's prompt (or failed to); the UI submits it."""

    def __init__(self, chat_id: int, turn_token: object, prompt_ids: list[int] | None, error: str | None) -> None:
        super().__init__()
        self.chat_id = chat_id
        self.turn_token = turn_token
        self.prompt_ids = prompt_ids
        self.error = error


class ResidentBlocks(Message):
    """Per chat id, the KV blocks that hold its cached prefix (from the engine thread)."""

    def __init__(self, blocks: dict[int, tuple[int, ...]]) -> None:
        super().__init__()
        self.blocks = blocks
