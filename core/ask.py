"""One question, one streamed reply: what `llmchat ask` runs."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from llmchat.core.config import EngineConfig
from llmchat.core.engine import LLMEngine
from llmchat.core.events import Finished, TextDelta
from llmchat.core.loader import load_model
from llmchat.core.metrics import RequestMetrics
from llmchat.core.sampling import SamplingParams


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
    """Load the model, submit one request to an engine, and stream its text deltas."""
    loaded = load_model(model, device=device or "cpu", progress=progress)
    prompt_ids = loaded.tokenizer.encode_chat(chat_messages(question, system))
    element_size = loaded.model.embed_tokens.weight.element_size()
    num_tokens = min(len(prompt_ids) + params.max_tokens, loaded.config.max_position_embeddings) + 16
    kv_bytes = loaded.config.kv_bytes_per_token(element_size) * num_tokens  # one request: no more KV than it can use
    engine = LLMEngine(loaded, EngineConfig(max_num_seqs=1, kv_cache_bytes=kv_bytes))
    stream = AskStream(iter(()))

    def deltas() -> Iterator[str]:
        engine.add_request(prompt_ids, params)
        while engine.has_work:
            for event in engine.step():
                if isinstance(event, TextDelta) and event.text:
                    yield event.text
                elif isinstance(event, Finished):
                    if event.error:
                        raise ValueError(event.error)
                    stream.metrics = dataclasses.replace(event.metrics, load_seconds=loaded.load_seconds)

    stream._deltas = deltas()
    return stream
