"""`ask --backend URL`: one question through an OpenAI-compatible server instead of the embedded engine."""
from __future__ import annotations

import queue
from collections.abc import Iterator

from ..api.events import Finished, TextDelta
from ..api.metrics import RequestMetrics
from .remote import RemoteBackend, RemoteError
from ..api.params import SamplingParams


class RemoteAskStream:
    """`ask --backend URL`: the same question through an OpenAI-compatible server (core/backends/remote.py).
    Iterate for text deltas; a failure after some text raises RemoteError once that text was yielded."""

    def __init__(self, url: str, messages: list[dict], params: SamplingParams, api_key: str | None = None,
                 model: str | None = None) -> None:
        self._events: queue.Queue = queue.Queue()
        self.backend = RemoteBackend(url, lambda handle, event: self._events.put(event), api_key, model,
                                     poll_metrics=False)
        self.messages, self.params = messages, params
        self.metrics: RequestMetrics | None = None

    def __iter__(self) -> Iterator[str]:
        try:
            self.backend.submit_messages(self.messages, self.params)
            while not isinstance(event := self._events.get(), Finished):
                if isinstance(event, TextDelta) and event.text:
                    yield event.text
            self.metrics = event.metrics
            if event.error:
                raise RemoteError(event.error)
        finally:
            self.backend.shutdown()
