"""EngineService: the engine's step loop on one daemon thread; the in-process Backend (core/api/protocol.py).

Submits, cancels and calls go through an inbox queue; the loop owns the engine and the tokenizer
(chat templates are rendered and tokenized here, on the engine thread). Each request's events go
through one path: the sink callback, called on the engine thread (a sink must only hand the event
over, never touch widgets); a handle also remembers its Finished for wait().
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import queue
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import replace

from ..inspect.block_map import block_map_of
from ..inspect.cache_check import check_cache
from ..api.explanation import PromptContext
from ..engine.engine import LLMEngine
from ..inspect.engine_facts import facts_of
from ..model.model_facts import model_facts
from ..api.events import EngineEvent, Finished, Started
from ..api.metrics import EngineStats, RequestMetrics
from .ahead_calls import CacheAheadCalls
from ..text.prompt import prompt_ids_for
from ..text.reasoning import opens_reasoning
from ..api.protocol import BackendInfo, ChatPrompt
from ..api.params import SamplingParams
from ..api.events import FinishReason

REASONING_TAIL_IDS = 16  # the prompt's last ids, decoded, say whether its generation prompt opened `<think>`

Sink = Callable[["RequestHandle", EngineEvent], None]
log = logging.getLogger(__name__)


class RequestHandle:
    """One submitted request; wait() for its Finished event."""

    def __init__(self, handle_id: int, owner: object = None, tag: Hashable | None = None) -> None:
        self.handle_id = handle_id
        self.owner = owner  # the service that issued it
        self.tag = tag  # the conversation it answers
        self.request_id: int | None = None  # the engine's id, set once the engine took it (see EngineStats.requests)
        self.result: Finished | None = None
        self._done = threading.Event()

    def _deliver(self, event: EngineEvent) -> None:
        if isinstance(event, Finished):
            self.result = event
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Finished | None:
        self._done.wait(timeout)
        return self.result


def model_identity(loaded) -> str:
    """A short id of the model (its folder's name and config; not the dtype): what a chat's ids are of."""
    config = json.dumps(loaded.config.to_hf_dict(), sort_keys=True)
    return hashlib.blake2b(f"{loaded.folder.name}|{config}".encode(), digest_size=8).hexdigest()


class EngineService(CacheAheadCalls):
    def __init__(self, engine: LLMEngine, sink: Sink | None = None, model_name: str | None = None) -> None:
        self.engine = engine
        self.sink = sink
        loaded, config = engine.loaded, engine.config
        name = model_name or loaded.folder.name
        self._info = BackendInfo(name, engine.max_context, config.device,
                                 loaded.weight_dtype, engine.kv_cache.bytes_per_token,
                                 loaded.load_seconds, model_identity(loaded), model_facts(loaded, model_name))
        self._inbox: queue.Queue[tuple] = queue.Queue()
        self._ids = itertools.count(1)
        self._by_request: dict[int, RequestHandle] = {}  # engine request id -> handle (engine thread only)
        self._request_of: dict[int, int] = {}  # handle id -> engine request id (engine thread only)
        self._opens_reasoning: set[int] = set()  # requests whose prompt opened `<think>` (engine thread only)
        self._stats = engine.stats()
        self._stats_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llmchat-engine", daemon=True)
        self._thread.start()

    # -- any thread -------------------------------------------------------------------------
    def submit(self, conversation_id: int, prompt: ChatPrompt, params: SamplingParams) -> RequestHandle:
        """Answer the prompt's last user message; its template is rendered on the engine thread."""
        return self._put("submit", (list(prompt.messages), list(prompt.token_ids)), params, conversation_id)

    def submit_messages(self, messages: list[dict], token_ids: list[int] | tuple[int, ...], params: SamplingParams,
                        tag: Hashable | None = None) -> RequestHandle:
        """Answer template messages (the last one a user message); `token_ids` are ids already fed and
        generated for their beginning (core/text/prompt.py checks them), () for none."""
        return self._put("submit", (list(messages), list(token_ids)), params, tag)

    def submit_ids(self, prompt_ids: list[int], params: SamplingParams, tag: Hashable | None = None,
                   use_prefix_cache: bool = True) -> RequestHandle:
        """A request whose prompt is already tokenized (benchmarks, completions, the cache exactness check)."""
        return self._put("submit_ids", list(prompt_ids), params, tag, use_prefix_cache)

    def _put(self, kind: str, prompt: object, params: SamplingParams, tag: Hashable | None,
             use_prefix_cache: bool = True) -> RequestHandle:
        if self._stopped.is_set():
            raise RuntimeError("the engine is shut down")
        handle = RequestHandle(next(self._ids), owner=self, tag=tag)
        self._inbox.put((kind, handle, prompt, params, use_prefix_cache))
        return handle

    def cancel(self, handle: RequestHandle) -> bool:
        """Ask the engine to stop this request; False if it already finished or is not this service's."""
        if handle.owner is not self or handle.done or self._stopped.is_set():
            return False
        self._inbox.put(("cancel", handle))
        return True

    @property
    def alive(self) -> bool:
        """False once the step loop has stopped (shut down, or it died)."""
        return not self._stopped.is_set()

    def stats(self) -> EngineStats:
        with self._stats_lock:
            return self._stats

    def info(self) -> BackendInfo:
        return self._info

    def residency(self) -> Future:
        """{conversation id: KV block ids holding its cached prefix and its reply in flight}, read on the
        engine thread from the hash chains it kept (nothing is shipped or re-hashed)."""
        return self._call(lambda engine: engine.residency())

    def block_map(self) -> Future:
        """A BlockMap of every KV block (core/inspect/block_map.py) and the EngineStats of the same moment."""
        return self._call(lambda engine: block_map_of(engine.block_manager, engine.residency(), engine.stats(),
                                                      engine.prefix_tiers()))

    def facts(self, copy_gb_s: float | None = None) -> Future:
        """EngineFacts (core/inspect/engine_facts.py): the live numbers of the misconceptions screen."""
        return self._call(lambda engine: facts_of(engine, copy_gb_s))

    def prefix_tiers(self) -> Future:
        """{conversation id: PrefixTiers}: of its prefix's full blocks, how many are resident, how many only on disk."""
        return self._call(lambda engine: engine.prefix_tiers())

    def remember(self, conversation_id: int, token_ids: list[int]) -> None:
        """Let prefix_tiers() report a conversation this engine has not answered yet (a chat from before a restart)."""
        ids = list(token_ids)
        self._call(lambda engine: engine.adopt_chain(conversation_id, ids))

    def pin(self, conversation_id: int, pinned: bool = True) -> Future:
        """Keep a conversation's blocks out of LRU eviction (within the pin budget) or return them to it;
        answers (blocks pinned, blocks in its chain)."""
        return self._call(lambda engine: engine.chains.pin(conversation_id, pinned))

    def check_cache(self, prompt_ids: list[int], num_tokens: int) -> Future:
        """A CacheCheck (core/inspect/cache_check.py), run on a short thread of its own: it waits for two
        ordinary requests of this engine, so other chats go on meanwhile."""
        future: Future = Future()
        ids, tokenizer = list(prompt_ids), self.engine.tokenizer

        def run() -> None:
            try:
                future.set_result(check_cache(self.submit_ids, ids, num_tokens, lambda i: tokenizer.decode([i])))
            except BaseException as e:  # noqa: BLE001 - handed to whoever awaits the future
                future.set_exception(e)

        threading.Thread(target=run, name="llmchat-cache-check", daemon=True).start()
        return future

    def _call(self, fn: Callable[[LLMEngine], object]) -> Future:
        future: Future = Future()
        if self._stopped.is_set():
            future.set_exception(RuntimeError("the engine is shut down"))
        else:
            self._inbox.put(("call", fn, future))
        return future

    def shutdown(self, timeout: float = 10.0) -> None:
        """Abort everything in flight (each gets Finished with reason abort), then stop the thread."""
        if not self._stopped.is_set():
            self._inbox.put(("shutdown",))
            self._thread.join(timeout)

    # -- engine thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                block = not self.engine.has_work
                try:
                    while True:
                        msg = self._inbox.get(block=block)
                        block = False
                        if msg[0] == "shutdown":
                            for request_id in list(self._by_request):
                                self.engine.abort(request_id)
                            self._dispatch(self.engine.step())
                            self.engine.close()  # the disk tier's queued writes land
                            return
                        self._handle(msg)
                except queue.Empty:
                    pass
                if self.engine.has_work:
                    self._dispatch(self._step())
                    with self._stats_lock:
                        self._stats = self.engine.stats()
        finally:
            self._stopped.set()

    def _step(self) -> list[EngineEvent]:
        """One engine step; an unexpected error fails the requests in flight instead of killing the thread."""
        try:
            return self.engine.step()
        except Exception as e:  # noqa: BLE001 - reported to every waiting client, then the loop goes on
            log.exception("engine step failed")
            self.engine.recover(f"internal engine error: {type(e).__name__}: {e}")
            return self.engine.step()

    def _handle(self, msg: tuple) -> None:
        if msg[0] in ("submit", "submit_ids"):
            kind, handle, prompt, params, use_prefix_cache = msg
            context = None
            if kind == "submit":
                try:
                    messages, token_ids = prompt
                    prompt = prompt_ids_for(self.engine.tokenizer, messages, token_ids)
                except Exception as e:  # noqa: BLE001 - a template that rejects the messages: this request only
                    self._refuse(handle, f"the chat template failed: {type(e).__name__}: {e}")
                    return
                system = messages[0]["content"] if messages and messages[0].get("role") == "system" else None
                context = PromptContext(tuple(token_ids), system, has_system_prompt=True)
            request_id = self.engine.add_request(prompt, params, handle.tag, context, use_prefix_cache)
            handle.request_id = request_id
            self._by_request[request_id] = handle
            if opens_reasoning(self.engine.tokenizer.decode(prompt[-REASONING_TAIL_IDS:])):
                self._opens_reasoning.add(request_id)
            self._request_of[handle.handle_id] = request_id
        elif msg[0] == "call":
            _, fn, future = msg
            if not future.set_running_or_notify_cancel():  # the caller gave up (a screen closed): skip it
                return
            try:
                future.set_result(fn(self.engine))
            except Exception as e:  # noqa: BLE001 - handed to the caller
                future.set_exception(e)
        elif msg[0] == "cancel":
            request_id = self._request_of.get(msg[1].handle_id)
            if request_id is not None:
                self.engine.abort(request_id)

    def _refuse(self, handle: RequestHandle, error: str) -> None:
        metrics = RequestMetrics(0, 0, 0, float("nan"), float("nan"), float("nan"))
        event = Finished(-handle.handle_id, FinishReason.ERROR, metrics, (), "", error)
        handle._deliver(event)
        if self.sink is not None:
            self.sink(handle, event)

    def _dispatch(self, events: list[EngineEvent]) -> None:
        for event in events:
            handle = self._by_request.get(event.request_id)
            if handle is None:
                continue
            if isinstance(event, Finished):
                del self._by_request[event.request_id]
                del self._request_of[handle.handle_id]
                self._opens_reasoning.discard(event.request_id)
            elif isinstance(event, Started) and event.request_id in self._opens_reasoning:
                event = replace(event, reasoning_open=True)
            handle._deliver(event)
            if self.sink is not None:
                self.sink(handle, event)
