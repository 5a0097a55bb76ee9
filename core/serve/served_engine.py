"""The embedded engine as `llmchat serve` uses it: requests in from the event loop, events out to
per-request asyncio queues, and the exact token ids of recent conversations kept for prefix reuse.

Every request goes through core/backends/service.py's EngineService, so requests from all clients are batched
together by the engine, as chats are. An OpenAI client resends the whole conversation each turn as
text; re-tokenizing it afresh could split the earlier replies differently from the ids the model
generated, so their KV would miss the cache. `TokenMemory` keeps, for recently answered conversations,
the exact ids fed and generated; a request that continues one starts from those ids and only its new
messages are tokenized (core/text/prompt.py, as the app does; it checks that the ids still spell the
rendered text and tokenizes afresh otherwise).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..engine.engine import LLMEngine
from ..api.events import EngineEvent, Finished, Started
from ..text.reasoning import split_reasoning
from ..api.protocol import BackendInfo
from ..api.params import SamplingParams
from .metrics import ServeMetrics
from ..backends.service import EngineService, RequestHandle

MAX_REMEMBERED = 512  # conversations whose ids are kept (each at most a context of ids)


def _key(messages: list[dict]) -> bytes:
    text = json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class TokenMemory:
    """Conversation (messages up to an assistant reply) -> the exact ids fed and generated; LRU-bounded."""

    def __init__(self, size: int = MAX_REMEMBERED) -> None:
        self.size = size
        self._ids: OrderedDict[bytes, tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, messages: list[dict], reply: str, token_ids: tuple[int, ...]) -> None:
        key = _key([*messages, {"role": "assistant", "content": reply}])
        with self._lock:
            self._ids[key] = token_ids
            self._ids.move_to_end(key)
            while len(self._ids) > self.size:
                self._ids.popitem(last=False)

    def ids_for(self, messages: list[dict]) -> tuple[int, ...]:
        """The ids of the longest remembered beginning of `messages` that ends with a reply; () if none."""
        with self._lock:
            for end in range(len(messages) - 1, 0, -1):
                if messages[end - 1]["role"] == "assistant":
                    ids = self._ids.get(_key(messages[:end]))
                    if ids is not None:
                        self._ids.move_to_end(_key(messages[:end]))
                        return ids
        return ()


@dataclass(slots=True)
class RequestStream:
    """One submitted request: its handle and the queue its events arrive on (on the server's loop)."""

    handle: RequestHandle
    events: asyncio.Queue
    messages: list[dict] | None = None  # chat requests: what the client sent
    started: Started | None = None


class ServedEngine:
    def __init__(self, engine: LLMEngine, model_name: str) -> None:
        self._routes: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._lock = threading.Lock()
        self.tokenizer = engine.tokenizer
        self.memory = TokenMemory()
        self.service = EngineService(engine, self._sink, model_name)
        self.info: BackendInfo = self.service.info()
        self.metrics = ServeMetrics(self.info.model_name, self.service.stats, engine.config.enable_prefix_caching)

    # -- engine thread ----------------------------------------------------------------------
    def _sink(self, handle: RequestHandle, event: EngineEvent) -> None:
        self.metrics.on_event(event)
        with self._lock:
            routes = self._routes
            route = routes.pop(handle.handle_id) if isinstance(event, Finished) else routes.get(handle.handle_id)
        if route is None:
            return
        loop, queue = route
        try:
            loop.call_soon_threadsafe(queue.put_nowait, event)
        except RuntimeError:  # the loop is closed: the server is stopping
            pass

    # -- the server's loop ------------------------------------------------------------------
    def submit_chat(self, messages: list[dict], params: SamplingParams) -> RequestStream:
        known_ids = self.memory.ids_for(messages)
        return self._submit(lambda: self.service.submit_messages(messages, known_ids, params), messages)

    def submit_ids(self, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        return self._submit(lambda: self.service.submit_ids(prompt_ids, params))

    def _submit(self, submit, messages: list[dict] | None = None) -> RequestStream:
        queue: asyncio.Queue = asyncio.Queue()
        with self._lock:  # the route exists before the engine thread can send the first event
            handle = submit()
            self._routes[handle.handle_id] = (asyncio.get_running_loop(), queue)
        return RequestStream(handle, queue, messages)

    async def next_event(self, stream: RequestStream) -> EngineEvent:
        event = await stream.events.get()
        if isinstance(event, Started):
            stream.started = event
        elif isinstance(event, Finished) and stream.messages is not None and stream.started is not None \
                and event.reason.value in ("stop", "length") and not event.error:
            ids = stream.started.prompt_ids + event.output_ids
            self.memory.remember(stream.messages, event.text, ids)
            _, content = split_reasoning(event.text, stream.started.reasoning_open)
            if content != event.text:  # a client sends the reply back as its content, without the reasoning
                self.memory.remember(stream.messages, content, ids)
        return event

    def cancel(self, stream: RequestStream) -> None:
        """Abort the request if it is still running (its blocks go back to the pool); harmless otherwise."""
        if not stream.handle.done:
            self.service.cancel(stream.handle)

    @property
    def alive(self) -> bool:
        return self.service.alive

    def shutdown(self) -> None:
        self.service.shutdown()
