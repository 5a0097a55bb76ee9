"""EngineService: the engine's step loop on one daemon thread; submit / cancel / stats / shutdown from any thread.

Requests and cancels go through an inbox queue; the loop owns the engine. Each request's events go to
its RequestHandle (iterable, blocking) and, if given, to a sink callback (the UI's bridge), called on
the engine thread: a sink must only hand the event over, never touch widgets.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from llmchat.core.engine import LLMEngine
from llmchat.core.events import EngineEvent, Finished
from llmchat.core.metrics import EngineStats
from llmchat.core.sampling import SamplingParams

Sink = Callable[["RequestHandle", EngineEvent], None]
log = logging.getLogger(__name__)


class RequestHandle:
    """One submitted request. Iterate it for its events (ends after Finished), or wait() for the result."""

    def __init__(self, handle_id: int, owner: object = None) -> None:
        self.handle_id = handle_id
        self.owner = owner  # the service that issued it
        self.request_id: int | None = None  # the engine's id, set once the engine took it (see EngineStats.requests)
        self.events: queue.Queue[EngineEvent] = queue.Queue()
        self.result: Finished | None = None
        self._done = threading.Event()

    def _deliver(self, event: EngineEvent) -> None:
        if isinstance(event, Finished):
            self.result = event
        self.events.put(event)
        if isinstance(event, Finished):
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Finished | None:
        self._done.wait(timeout)
        return self.result

    def __iter__(self) -> Iterator[EngineEvent]:
        while True:
            event = self.events.get()
            yield event
            if isinstance(event, Finished):
                return


class EngineService:
    def __init__(self, engine: LLMEngine, sink: Sink | None = None) -> None:
        self.engine = engine
        self.sink = sink
        self._inbox: queue.Queue[tuple] = queue.Queue()
        self._ids = itertools.count(1)
        self._by_request: dict[int, RequestHandle] = {}  # engine request id -> handle (engine thread only)
        self._request_of: dict[int, int] = {}  # handle id -> engine request id (engine thread only)
        self._stats = engine.stats()
        self._stats_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llmchat-engine", daemon=True)
        self._thread.start()

    # -- any thread -------------------------------------------------------------------------
    def submit(self, prompt_ids: list[int], params: SamplingParams) -> RequestHandle:
        if self._stopped.is_set():
            raise RuntimeError("the engine is shut down")
        handle = RequestHandle(next(self._ids), owner=self)
        self._inbox.put(("submit", handle, list(prompt_ids), params))
        return handle

    def cancel(self, handle: RequestHandle) -> bool:
        """Ask the engine to stop this request; False if it already finished or is not this service's."""
        if handle.owner is not self or handle.done or self._stopped.is_set():
            return False
        self._inbox.put(("cancel", handle))
        return True

    def stats(self) -> EngineStats:
        with self._stats_lock:
            return self._stats

    def resident_blocks(self, token_ids_by_key: dict, in_flight: dict | None = None) -> Future:
        """For each key (a chat, say), the KV blocks that hold its token ids' cached prefix, plus the block
        table of its request in flight (in_flight: key -> RequestHandle), read on the engine thread.
        The future's result: {key: tuple of block ids}; keys sharing ids share those blocks."""
        in_flight = in_flight or {}

        def read(engine: LLMEngine) -> dict:
            blocks = {key: set(engine.block_manager.resident_blocks(ids)) for key, ids in token_ids_by_key.items()}
            for key, handle in in_flight.items():
                if handle.request_id is not None:
                    blocks.setdefault(key, set()).update(engine.blocks_of(handle.request_id))
            return {key: tuple(sorted(ids)) for key, ids in blocks.items() if ids}

        return self._call(read)

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
            self.engine.scheduler.lookups.clear()
            self.engine.fail_all(f"internal engine error: {type(e).__name__}: {e}")
            return self.engine.step()

    def _handle(self, msg: tuple) -> None:
        if msg[0] == "submit":
            _, handle, prompt_ids, params = msg
            request_id = self.engine.add_request(prompt_ids, params)
            handle.request_id = request_id
            self._by_request[request_id] = handle
            self._request_of[handle.handle_id] = request_id
        elif msg[0] == "call":
            _, fn, future = msg
            try:
                future.set_result(fn(self.engine))
            except Exception as e:  # noqa: BLE001 - handed to the caller
                future.set_exception(e)
        elif msg[0] == "cancel":
            request_id = self._request_of.get(msg[1].handle_id)
            if request_id is not None:
                self.engine.abort(request_id)

    def _dispatch(self, events: list[EngineEvent]) -> None:
        for event in events:
            handle = self._by_request.get(event.request_id)
            if handle is None:
                continue
            if isinstance(event, Finished):
                del self._by_request[event.request_id]
                del self._request_of[handle.handle_id]
            handle._deliver(event)
            if self.sink is not None:
                self.sink(handle, event)
