"""A backend for UI tests that speaks core/api/protocol.py without an engine: a scripted reply, streamed from
its own thread word by word, with made-up but consistent token ids and metrics."""
from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from llmchat.core.api.events import Finished, Started, TextDelta
from llmchat.core.api.metrics import EngineStats, RequestMetrics
from llmchat.core.api.protocol import BackendInfo
from llmchat.core.api.events import FinishReason


@dataclass(slots=True)
class FakeHandle:
    handle_id: int
    request_id: int | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)


class FakeBackend:
    """Replies with `reply` to every message; the prompt's ids are the conversation's ids + one id per
    character of the new message (so a test can check that the UI keeps exactly what the backend said)."""

    def __init__(self, sink, reply: str = "Hello from the fake backend.", delay_s: float = 0.01,
                 refuse_after_s: float | None = None, drafted_words: frozenset[int] = frozenset(),
                 reasoning_open: bool = False) -> None:
        self.sink = sink
        self.reasoning_open = reasoning_open  # Started says the prompt opened <think> (the reply begins inside)
        self.drafted_words = drafted_words  # indexes of reply words streamed as kept speculative drafts
        self.refuse_after_s = refuse_after_s  # not None: refuse every prompt after that long
        self.reply = reply
        self.delay_s = delay_s
        self.submitted: list[tuple[int, list[dict], list[int]]] = []
        self._ids = itertools.count(1)
        self._threads: list[threading.Thread] = []

    def submit(self, conversation_id, prompt, params) -> FakeHandle:
        messages, token_ids = list(prompt.messages), list(prompt.token_ids)
        self.submitted.append((conversation_id, messages, token_ids))
        handle = FakeHandle(next(self._ids))
        handle.request_id = handle.handle_id
        prompt = token_ids + [1000 + ord(c) % 1000 for c in messages[-1]["content"]]
        thread = threading.Thread(target=self._run, args=(handle, prompt, params.max_tokens), daemon=True)
        self._threads.append(thread)
        thread.start()
        return handle

    def _run(self, handle: FakeHandle, prompt: list[int], max_tokens: int) -> None:
        start = time.perf_counter()
        if self.refuse_after_s is not None:  # as the engine refuses a prompt longer than the context
            time.sleep(self.refuse_after_s)
            metrics = RequestMetrics(len(prompt), 0, 0, float("nan"), float("nan"), float("nan"))
            self.sink(handle, Finished(handle.request_id, FinishReason.ERROR, metrics, (), "",
                                       f"the prompt has {len(prompt)} tokens but the model's context is 4"))
            return
        self.sink(handle, Started(handle.request_id, tuple(prompt), 0, reasoning_open=self.reasoning_open))
        output: list[int] = []
        words = self.reply.split(" ")
        reason = FinishReason.STOP
        for i, word in enumerate(words):
            if handle.cancelled.is_set():
                reason = FinishReason.ABORT
                break
            if len(output) >= max_tokens:
                reason = FinishReason.LENGTH
                break
            text = word if i == 0 else " " + word
            output.append(5000 + i)
            self.sink(handle, TextDelta(handle.request_id, text, (output[-1],), i in self.drafted_words))
            time.sleep(self.delay_s)
        text = " ".join(words[: len(output)])
        elapsed = time.perf_counter() - start
        metrics = RequestMetrics(len(prompt), 0, len(output), 0.0, self.delay_s, elapsed / max(len(output), 1))
        self.sink(handle, Finished(handle.request_id, reason, metrics, tuple(output), text))

    def cancel(self, handle: FakeHandle) -> bool:
        handle.cancelled.set()
        return True

    def stats(self) -> EngineStats:  # a remote server's view: no block figures
        return EngineStats(None, None, None, None, None, None, 0, 0, float("nan"), (), (), float("nan"), float("nan"))

    def residency(self) -> Future:
        future: Future = Future()
        future.set_result({})
        return future

    def info(self) -> BackendInfo:
        return BackendInfo("fake-model", 4096, "nowhere", "none", None)

    def shutdown(self) -> None:
        for thread in self._threads:
            thread.join(5)
