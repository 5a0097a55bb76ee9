"""Textual messages: how workers and the engine thread hand things to the UI (post_message is thread-safe)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message

from ..core.api.protocol import BackendInfo

if TYPE_CHECKING:
    from .session import ChatSession


class EngineProgress(Message):
    """A line of model-loading progress (fetching, converting, loading)."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line


class EngineReady(Message):
    def __init__(self, info: BackendInfo) -> None:
        super().__init__()
        self.info = info


class EngineFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class EngineEventsPending(Message):
    """The bridge holds engine events to drain; at most one of these is in the queue at a time."""


class TurnStarted(Message):
    """A chat's message went to the backend; its reply streams into session.turn."""

    def __init__(self, session: "ChatSession") -> None:
        super().__init__()
        self.session = session


class TurnFinished(Message):
    """A chat's reply is final and stored (session.turn is None again; session.banner may say why it ended)."""

    def __init__(self, session: "ChatSession") -> None:
        super().__init__()
        self.session = session


class TurnRefused(Message):
    """The backend refused a chat's prompt: the turn was undone; `text` is the user's message, to give back."""

    def __init__(self, session: "ChatSession", text: str) -> None:
        super().__init__()
        self.session = session
        self.text = text


class SaveFailed(Message):
    """A store write failed (full or read-only disk); the chat goes on in memory."""

    def __init__(self, path: Path, error: str) -> None:
        super().__init__()
        self.path = path
        self.error = error


class ResidentBlocks(Message):
    """Per chat id, the KV blocks that hold its cached prefix (from the engine thread)."""

    def __init__(self, blocks: dict[int, tuple[int, ...]]) -> None:
        super().__init__()
        self.blocks = blocks


class PrefixTiersReported(Message):
    """Per chat id, where its cached prefix is: resident blocks, blocks only on disk (from the engine thread)."""

    def __init__(self, tiers: dict) -> None:
        super().__init__()
        self.tiers = tiers
