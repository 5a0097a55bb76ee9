"""The UI's one door to the engine: start it off the UI thread, hand its events over, pass calls through.

The backend (core/api/protocol.py) calls `_sink` for every event, on its own thread. The sink never touches widgets: it appends the event
to a buffer and posts one EngineEventsPending message if none is queued; the UI drains the buffer
when it gets to it. However fast the engine goes, the UI handles one message per batch of events, so
four chats streaming at once cost the UI one drain per frame, not one message per token.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.app import App

from ..core.api.protocol import Backend, BackendInfo, Handle, InspectableBackend, Sink
from ..core.config import model_label
from .messages import (EngineEventsPending, EngineFailed, EngineProgress, EngineReady, PrefixTiersReported,
                                  ResidentBlocks)

if TYPE_CHECKING:  # the engine loads lazily, in a worker thread
    from ..core.config import EngineConfig
    from ..core.chats.conversation import Conversation
    from ..core.api.events import EngineEvent
    from ..core.api.metrics import EngineStats
    from ..core.api.params import SamplingParams

EngineFactory = Callable[[Callable[[str], None], Sink], Backend]

DEFAULT_MAX_NUM_SEQS = 8


@dataclass(slots=True)
class StreamItem:
    handle: Handle
    event: "EngineEvent"


def default_engine_factory(config: "EngineConfig | None" = None) -> EngineFactory:
    """Load config.model (fetching/converting it on first use) and start the in-process engine."""

    def factory(progress: Callable[[str], None], sink: Sink) -> Backend:
        from ..core.config import EngineConfig
        from ..core.engine.engine import LLMEngine
        from ..core.model.loader import load_model_for
        from ..core.passing_thread import run_in_passing_thread
        from ..core.backends.service import EngineService

        cfg = config or EngineConfig(max_num_seqs=DEFAULT_MAX_NUM_SEQS)

        def build() -> LLMEngine:
            loaded = load_model_for(cfg, progress=progress)
            progress("starting the engine (allocating the KV cache)")
            return LLMEngine(loaded, cfg)

        # (in a thread that ends: the worker thread that calls this stays alive, see core/passing_thread.py)
        return EngineService(run_in_passing_thread(build), sink, model_label(cfg.model))

    return factory


def remote_engine_factory(url: str, api_key: str | None = None, model: str | None = None) -> EngineFactory:
    """Chat through an OpenAI-compatible server (core/backends/remote.py) instead of the embedded engine."""

    def factory(progress: Callable[[str], None], sink: Sink) -> Backend:
        from ..core.backends.remote import RemoteBackend

        progress(f"connecting to {url}")
        return RemoteBackend(url, sink, api_key=api_key, model=model)

    return factory


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


class EngineBridge:
    def __init__(self, app: App, factory: EngineFactory) -> None:
        self.app = app
        self.factory = factory
        self.service: Backend | None = None
        self.inspect: InspectableBackend | None = None  # the same backend, when it is the in-process engine
        self.info: BackendInfo | None = None
        self.failure: str | None = None  # why the last load failed (one line), until a load succeeds
        self._lock = threading.Lock()
        self._items: list[StreamItem] = []
        self._posted = False

    # -- start (a thread worker) ------------------------------------------------------------
    def start(self) -> None:
        try:
            self.load(self.factory)
        except Exception as e:  # a bad model file, offline on first start, out of memory...
            self.failure = one_line(e)
            self.app.post_message(EngineFailed(self.failure))

    def load(self, factory: EngineFactory) -> None:
        """Build the backend (blocking; a worker thread) and post EngineReady; raises what the factory raised."""
        service = factory(lambda line: self.app.post_message(EngineProgress(line)), self._sink)
        self.factory = factory
        self.info = service.info()
        self.inspect = service if isinstance(service, InspectableBackend) else None  # (asked once, here)
        self.service, self.failure = service, None
        self.app.post_message(EngineReady(self.info))

    def unload(self) -> None:
        """Blocking: shut the backend down (what is in flight is aborted) and let go of it: not ready until
        the next load. One model at a time: the next one loads only after this one is gone."""
        service, self.service, self.inspect, self.info = self.service, None, None, None
        if service is not None:
            service.shutdown()

    @property
    def ready(self) -> bool:
        return self.service is not None

    # -- engine thread ----------------------------------------------------------------------
    def _sink(self, handle: Handle, event: "EngineEvent") -> None:
        with self._lock:
            self._items.append(StreamItem(handle, event))
            if self._posted:
                return
            self._posted = True
        self.app.post_message(EngineEventsPending())

    # -- UI thread --------------------------------------------------------------------------
    def drain(self) -> list[StreamItem]:
        with self._lock:
            items, self._items = self._items, []
            self._posted = False
        return items

    def submit(self, conversation_id: int, conversation: "Conversation", params: "SamplingParams") -> Handle:
        assert self.service is not None
        return self.service.submit(conversation_id, conversation.prompt(), params)  # (read now, on this thread)

    def cancel(self, handle: Handle) -> bool:
        return self.service.cancel(handle) if self.service is not None else False

    def request_residency(self) -> bool:
        """Ask which KV blocks hold each chat's cached prefix and its reply in flight; the answer comes as a
        ResidentBlocks message. False when there is no backend to ask (not ready, or shut down)."""
        if self.service is None:
            return False
        try:
            future = self.service.residency()
        except RuntimeError:  # shut down
            return False
        future.add_done_callback(lambda f: f.exception() is None and self.app.post_message(ResidentBlocks(f.result())))
        if self.inspect is not None:
            self.inspect.prefix_tiers().add_done_callback(
                lambda f: f.exception() is None and self.app.post_message(PrefixTiersReported(f.result())))
        return True

    def remember(self, conversation_id: int, token_ids: list[int]) -> None:
        """Tell the backend about a chat from an earlier run, so its prefix's tiers can be shown before it speaks."""
        if self.inspect is not None and token_ids:
            self.inspect.remember(conversation_id, token_ids)

    async def ask(self, call: Callable[[InspectableBackend], Future]) -> object | None:
        """Await one inspection call (`lambda backend: backend.block_map()`); None when the backend is no
        in-process engine, is not ready, or shut down meanwhile. A screen that awaits it checks that it is
        still attached before it uses the answer."""
        if self.inspect is None:
            return None
        try:
            return await asyncio.wrap_future(call(self.inspect))
        except RuntimeError:  # the engine shut down
            return None

    def stats(self) -> "EngineStats | None":
        return self.service.stats() if self.service is not None else None

    def shutdown(self) -> None:
        """Blocking: aborts what is in flight (their Finished events land in the buffer), stops the thread."""
        if self.service is not None:
            self.service.shutdown()
