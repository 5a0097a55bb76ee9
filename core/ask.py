"""One question, one streamed reply: what `llmchat ask` runs."""
from __future__ import annotations

from collections.abc import Callable, Iterator

from llmchat.core.dense import generate_dense
from llmchat.core.loader import load_model
from llmchat.core.metrics import RequestMetrics, RequestTimings
from llmchat.core.sampling import SamplingParams
from llmchat.core.stop import StopStringMatcher
from llmchat.core.tokenizer import IncrementalDetokenizer


def chat_messages(question: str, system: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": question}]


class AskStream:
    """Iterate for text deltas; `metrics` is set once the iteration ends."""

    def __init__(self, deltas: Iterator[str]) -> None:
        self._deltas = deltas
        self.metrics: RequestMetrics | None = None

    def __iter__(self) -> Iterator[str]:
        return self._deltas


def ask_stream(
    question: str,
    params: SamplingParams,
    system: str | None = None,
    model: str | None = None,
    device: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> AskStream:
    loaded = load_model(model, device=device or "cpu", progress=progress)
    tokenizer = loaded.tokenizer
    prompt_ids = tokenizer.encode_chat(chat_messages(question, system))
    stream = AskStream(iter(()))

    def deltas() -> Iterator[str]:
        timings = RequestTimings()
        detok = IncrementalDetokenizer(tokenizer)
        stop = StopStringMatcher(params.stop)
        for token in generate_dense(loaded.model, prompt_ids, params, tokenizer.stop_token_ids):
            timings.on_token()
            text, stopped = stop.feed(detok.push(token))
            if text:
                yield text
            if stopped:
                break
        else:
            tail, _ = stop.feed(detok.flush())
            yield tail + stop.flush()
        stream.metrics = RequestMetrics.from_timings(
            timings, len(prompt_ids), 0, load_seconds=loaded.load_seconds
        )

    stream._deltas = deltas()
    return stream
