"""What the UI needs from any backend, and nothing else.

The in-process engine (core/backends/service.py: EngineService) implements it; a remote backend speaking to
an OpenAI-compatible server can implement it too, and UI tests use a fake one. A backend renders the
chat template and tokenizes on its own thread; the UI never touches a tokenizer or the engine.

Events (core/api/events.py) for a submitted request, in order, through the one sink the backend was
started with, called on the backend's thread (a sink must only hand the event over):
`Started` (at most once: the prompt's ids and how many were cached), `TextDelta`*, then exactly one
`Finished` (reason, metrics, output ids, error) — a refused prompt gets only the `Finished`.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # (so that the UI can import this module without loading torch)
    from .events import EngineEvent
    from .metrics import EngineStats
    from .model_facts import ModelFacts
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
    facts: "ModelFacts | None" = None  # what was loaded (architecture, parameters, weight types); None: unknown


class Handle(Protocol):
    """One submitted request, as its backend issued it."""

    handle_id: int
    request_id: int | None  # the backend's id for it, once known (EngineStats.requests uses it)


Sink = Callable[[Handle, "EngineEvent"], None]


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    """What a backend answers: the template's messages (the last a user message) and the ids already fed and
    generated for their beginning (a prefix the backend checks against its own rendering; () for none)."""

    messages: tuple[dict, ...]
    token_ids: tuple[int, ...] = ()


class Backend(Protocol):
    def submit(self, conversation_id: int, prompt: ChatPrompt, params: "SamplingParams") -> Handle:
        """Answer the prompt's last message (a user message) for this conversation; its ids prefix the prompt."""

    def cancel(self, handle: Handle) -> bool:
        """Stop a request; its Finished (reason abort, the text so far) follows. False: not in flight."""

    def stats(self) -> "EngineStats":
        """The latest snapshot; its KV/block fields are None where the backend cannot tell."""

    def residency(self) -> Future:
        """Per conversation id, the KV block ids holding its cached prefix and its reply in flight
        (conversations sharing block ids share those blocks); {} where the backend cannot tell."""

    def info(self) -> BackendInfo: ...

    def shutdown(self) -> None:
        """Abort what is in flight (each gets its Finished), then stop."""


@runtime_checkable
class InspectableBackend(Backend, Protocol):
    """What only the in-process engine offers (core/backends/service.py): its blocks, tiers and facts. The UI
    asks `isinstance(backend, InspectableBackend)` once, when the backend is ready, and never probes names.
    Each call answers through a Future (read on the engine's thread); a shut-down backend's raises RuntimeError."""

    def prefix_tiers(self) -> Future:
        """{conversation id: metrics.PrefixTiers}: of its prefix's full blocks, how many are resident, how many
        only on disk."""

    def remember(self, conversation_id: int, token_ids: list[int]) -> None:
        """Let prefix_tiers() report a conversation this backend has not answered yet (one from before a restart)."""

    def block_map(self) -> Future:
        """A BlockMap of every KV block (core/inspect/block_map.py)."""

    def facts(self, copy_gb_s: float | None = None) -> Future:
        """EngineFacts (core/inspect/engine_facts.py): the live numbers of the misconceptions screen."""

    def preview_cost(self, messages: list[dict], token_ids: list[int], conversation_id: int | None = None,
                     warm: bool = False) -> Future:
        """A CostPreview (core/inspect/cost_preview.py): what the turn of `messages` (the draft last, after the
        chat's `token_ids`) would reuse and prefill, priced at the measured prefill rate; with `warm`, that prompt
        is also prefilled in idle steps for the conversation (the preview says how far it got)."""

    def block_tiers(self, token_ids: list[int]) -> Future:
        """(block size, per full block of a chat's ids: "memory", "disk" or "gone"): core/inspect/context_map.py."""

    def warm_chat(self, conversation_id: int, token_ids: list[int]) -> Future:
        """Bring a chat the user opened back into memory (its disk-tier blocks read, the rest computed) in idle
        steps; answers the tokens it will have ready."""

    def check_cache(self, prompt_ids: list[int], num_tokens: int) -> Future:
        """A CacheCheck (core/inspect/cache_check.py): `prompt_ids` continued greedily for `num_tokens` with the
        prefix cache and without it, the two outputs compared."""

    def pin(self, conversation_id: int, pinned: bool = True) -> Future:
        """Keep a conversation's KV blocks out of LRU eviction, within the pin budget (pinned=False returns them to
        the LRU); answers (blocks pinned, blocks in its chain)."""
