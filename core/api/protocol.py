"""What the UI needs from any backend, and nothing else.

The in-process engine (core/service.py: EngineService) implements it; a remote backend speaking to
an OpenAI-compatible server can implement it too, and UI tests use a fake one. A backend renders the
chat template and tokenizes on its own thread; the UI never touches a tokenizer or the engine.

Events (core/events.py) for a submitted request, in order, through the one sink the backend was
started with, called on the backend's thread (a sink must only hand the event over):
`Started` (at most once: the prompt's ids and how many were cached), `TextDelta`*, then exactly one
`Finished` (reason, metrics, output ids, error) — a refused prompt gets only the `Finished`.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # (so that the UI can import this module without loading torch)
    from ..chats.conversation import Conversation
    from .events import EngineEvent
    from .metrics import EngineStats
    from ..api.params import SamplingParams


@dataclass(frozen=True, slots=True)
class BackendInfo:
    model_name: str
    context_length: int
    device: str
    dtype: str
    kv_bytes_per_token: int | None  # None: the backend does not say
    load_seconds: float = 0.0
    model_id: str | None = None  # which model (weights + config): a chat's token ids are of one; None: unknown


class Handle(Protocol):
    """One submitted request, as its backend issued it."""

    handle_id: int
    request_id: int | None  # the backend's id for it, once known (EngineStats.requests uses it)


Sink = Callable[[Handle, "EngineEvent"], None]


class Backend(Protocol):
    def submit(self, conversation_id: int, conversation: "Conversation", params: "SamplingParams") -> Handle:
        """Answer the conversation's last message (a user message; replies still streaming are left out).
        The conversation is read at once, on the caller's thread; its ids prefix the prompt."""

    def cancel(self, handle: Handle) -> bool:
        """Stop a request; its Finished (reason abort, the text so far) follows. False: not in flight."""

    def stats(self) -> "EngineStats":
        """The latest snapshot; its KV/block fields are None where the backend cannot tell."""

    def residency(self) -> Future:
        """Per conversation id, the KV block ids holding its cached prefix and its reply in flight
        (conversations sharing block ids share those blocks); {} where the backend cannot tell."""

    def info(self) -> BackendInfo: ...

    # Optional (the UI checks with getattr): where each conversation's prefix is across the cache's tiers.
    # def prefix_tiers(self) -> Future: {conversation id: metrics.PrefixTiers}
    # def remember(self, conversation_id: int, token_ids: list[int]) -> None: a conversation from before a restart

    def shutdown(self) -> None:
        """Abort what is in flight (each gets its Finished), then stop."""
