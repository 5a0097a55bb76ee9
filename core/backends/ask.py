"""One question, one streamed reply: what `llmchat ask` runs."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from ..config import EngineConfig
from ..engine.engine import LLMEngine
from ..api.events import Finished, TextDelta
from ..model.loader import describe, load_model_for
from ..api.metrics import RequestMetrics
from ..text.prompt import chat_messages, prompt_ids_for
from ..api.params import SamplingParams


class AskStream:
    """Iterate for text deltas (the request starts with the iteration); `metrics` is set once it ends."""

    def __init__(self, engine: LLMEngine, prompt_ids: list[int], params: SamplingParams, load_seconds: float,
                 model_line: str = ""):
        self.engine = engine
        self.model_line = model_line  # what was loaded (loader.describe)
        self.prompt_ids = prompt_ids
        self.params = params
        self.load_seconds = load_seconds
        self.metrics: RequestMetrics | None = None

    def threads_text(self) -> str:
        """The compute team as it ended (it may have shrunk while other programs were busy)."""
        governor = self.engine.threads
        return f"threads {governor.plan.describe(governor.num_threads)}"

    def __iter__(self) -> Iterator[str]:
        self.engine.add_request(self.prompt_ids, self.params)
        try:
            for event in self.engine.run_until_done():
                if isinstance(event, TextDelta) and event.text:
                    yield event.text
                elif isinstance(event, Finished):
                    if event.error:
                        raise ValueError(event.error)
                    self.metrics = dataclasses.replace(event.metrics, load_seconds=self.load_seconds)
        finally:
            self.engine.close()  # the disk tier's writes land before the process exits


def ask_stream(
    question: str,
    params: SamplingParams,
    system: str | None = None,
    model: str | None = None,
    device: str | None = None,
    progress: Callable[[str], None] | None = None,
    weight_dtype: str | None = None,
    kv_disk_bytes: int = 0,
    num_speculative_tokens: int = 0,
    draft_model: str | None = None,
    num_threads: int | None = None,
) -> AskStream:
    """Load the model and set up one request on an engine sized for it; iterate the result for the reply.
    With kv_disk_bytes, the prompt's full blocks are looked up in and written to the disk tier."""
    config = EngineConfig(model=model, device=device or "cpu", max_num_seqs=1, weight_dtype=weight_dtype or "auto",
                          kv_disk_bytes=kv_disk_bytes, num_speculative_tokens=num_speculative_tokens,
                          draft_model=draft_model, num_threads=num_threads)
    loaded = load_model_for(config, progress=progress)
    prompt_ids = prompt_ids_for(loaded.tokenizer, chat_messages(question, system))
    element_size = loaded.model.dtype.itemsize
    num_tokens = min(len(prompt_ids) + params.max_tokens, loaded.config.max_position_embeddings) + 16
    kv_bytes = loaded.config.kv_bytes_per_token(element_size) * num_tokens  # one request: no more KV than it can use
    engine = LLMEngine(loaded, dataclasses.replace(config, kv_cache_bytes=kv_bytes))
    return AskStream(engine, prompt_ids, params, loaded.load_seconds, describe(loaded))
