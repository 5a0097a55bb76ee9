"""The UI's one door to the engine: start it off the UI thread, hand its events over, pass calls through.

The engine thread calls `_sink` for every event. The sink never touches widgets: it appends the event
to a buffer and posts one EngineEventsPending message if none is queued; the UI drains the buffer
when it gets to it. However fast the engine goes, the UI handles one message per batch of events, so
four chats streaming at once cost the UI one drain per frame, not one message per token.
"""
from __future__ import annotations

import threading
from pathlib import Path
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.app import App

from llmchat.tui.messages import (
    EngineEventsPending, EngineFailed, EngineInfo, EngineProgress, EngineReady, ResidentBlocks,
)

if TYPE_CHECKING:  # the engine loads lazily, in a worker thread
    from llmchat.core.config import EngineConfig
    from llmchat.core.events import EngineEvent
    from llmchat.core.metrics import EngineStats
    from llmchat.core.sampling import SamplingParams
    from llmchat.core.service import EngineService, RequestHandle, Sink

    EngineFactory = Callable[[Callable[[str], None], Sink], EngineService]

DEFAULT_MAX_NUM_SEQS = 8
DEFAULT_MODEL_LABEL = "SmolLM2-135M-Instruct"


@dataclass(slots=True)
class StreamItem:
    handle: "RequestHandle"
    event: "EngineEvent"


def default_engine_factory(model: str | None, config: "EngineConfig | None" = None) -> "EngineFactory":
    """Load the model (fetching/converting it on first use) and start the in-process engine."""

    def factory(progress: Callable[[str], None], sink: "Sink") -> "EngineService":
        from llmchat.core.config import EngineConfig
        from llmchat.core.engine import LLMEngine
        from llmchat.core.loader import load_model
        from llmchat.core.service import EngineService

        cfg = config or EngineConfig(max_num_seqs=DEFAULT_MAX_NUM_SEQS)
        loaded = load_model(model, device=cfg.device, progress=progress)
        progress("starting the engine (allocating the KV cache)")
        return EngineService(LLMEngine(loaded, cfg), sink)

    return factory


def model_label(model: str | None) -> str:
    """The name to show for --model (a .gguf file or a model folder), or the default model's."""
    if model is None:
        return DEFAULT_MODEL_LABEL
    path = Path(model)
    return path.stem if path.suffix.lower() == ".gguf" else path.name


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


class EngineBridge:
    def __init__(self, app: App, factory: "EngineFactory", label: str | None = None) -> None:
        self.app = app
        self.factory = factory
        self.label = label  # the model's name to show; None: the model folder's name
        self.service: EngineService | None = None
        self.info: EngineInfo | None = None
        self._lock = threading.Lock()
        self._items: list[StreamItem] = []
        self._posted = False

    # -- start (a thread worker) ------------------------------------------------------------
    def start(self) -> None:
        try:
            service = self.factory(lambda line: self.app.post_message(EngineProgress(line)), self._sink)
        except Exception as e:  # a bad model file, offline on first start, out of memory...
            self.app.post_message(EngineFailed(one_line(e)))
            return
        engine: Any = getattr(service, "engine", None)
        loaded = getattr(engine, "loaded", None)
        self.info = EngineInfo(
            model_name=self.label or (loaded.folder.name if loaded else "remote"),
            device=str(getattr(engine.config, "device", "?")) if engine else "?",
            max_context=int(getattr(engine, "max_context", 0)),
            load_seconds=float(getattr(loaded, "load_seconds", 0.0)),
        )
        self.service = service
        self.app.post_message(EngineReady(self.info))

    @property
    def ready(self) -> bool:
        return self.service is not None

    @property
    def tokenizer(self):
        assert self.service is not None
        return self.service.engine.tokenizer

    # -- engine thread ----------------------------------------------------------------------
    def _sink(self, handle: "RequestHandle", event: "EngineEvent") -> None:
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

    def submit(self, prompt_ids: list[int], params: "SamplingParams") -> "RequestHandle":
        assert self.service is not None
        return self.service.submit(prompt_ids, params)

    def cancel(self, handle: "RequestHandle") -> bool:
        return self.service.cancel(handle) if self.service is not None else False

    def request_resident_blocks(self, token_ids_by_chat: dict[int, list[int]],
                                in_flight: dict[int, "RequestHandle"] | None = None) -> bool:
        """Ask which KV blocks hold each chat's cached prefix and its request in flight; the answer comes as a
        ResidentBlocks message. False when the engine cannot tell (not ready, or a backend without block figures)."""
        ask = getattr(self.service, "resident_blocks", None)
        if ask is None:
            return False
        try:
            future = ask(token_ids_by_chat, in_flight)
        except RuntimeError:  # shut down
            return False
        future.add_done_callback(lambda f: f.exception() is None and self.app.post_message(ResidentBlocks(f.result())))
        return True

    def stats(self) -> "EngineStats | None":
        return self.service.stats() if self.service is not None else None

    def shutdown(self) -> None:
        """Blocking: aborts what is in flight (their Finished events land in the buffer), stops the thread."""
        if self.service is not None:
            self.service.shutdown()
