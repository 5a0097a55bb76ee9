"""OpenAI response bodies (chat completions and completions, whole or as SSE chunks) from engine events."""
from __future__ import annotations

import json
import secrets
import time

from ..api.metrics import RequestMetrics
from ..api.events import FinishReason

FINISH_REASONS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length", FinishReason.ABORT: "abort",
                  FinishReason.ERROR: "error"}


class Reply:
    """What one response says about its request: id, model, kind (chat or text completion)."""

    def __init__(self, model: str, chat: bool) -> None:
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model
        self.chat = chat

    def _envelope(self, choices: list[dict], chunk: bool) -> dict:
        kind = "chat.completion" if self.chat else "text_completion"
        return {"id": self.id, "object": kind + (".chunk" if chunk and self.chat else ""), "created": self.created,
                "model": self.model, "choices": choices}

    def whole(self, text: str, reason: FinishReason, metrics: RequestMetrics, reasoning: str | None = None) -> dict:
        """`reasoning`: a chat reply's reasoning, sent apart as `message.reasoning_content` (None: it had none)."""
        choice = {"index": 0, "finish_reason": FINISH_REASONS[reason], "logprobs": None}
        message = {"role": "assistant", "content": text}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        choice.update({"message": message} if self.chat else {"text": text})
        return self._envelope([choice], chunk=False) | {"usage": usage(metrics)}

    def chunk(self, text: str | None, reason: FinishReason | None = None, first: bool = False,
              reasoning: str | None = None) -> bytes:
        """One SSE event with a text delta (chat: the first one also says the role; `reasoning`: a reasoning
        delta, as `delta.reasoning_content`) or the finish reason."""
        choice: dict = {"index": 0, "finish_reason": FINISH_REASONS[reason] if reason else None, "logprobs": None}
        if self.chat:
            delta = {"role": "assistant"} if first else {}
            if text is not None:
                delta["content"] = text
            if reasoning is not None:
                delta["reasoning_content"] = reasoning
            choice["delta"] = delta
        else:
            choice["text"] = text or ""
        return sse(self._envelope([choice], chunk=True))

    def usage_chunk(self, metrics: RequestMetrics) -> bytes:
        return sse(self._envelope([], chunk=True) | {"usage": usage(metrics)})


def usage(m: RequestMetrics) -> dict:
    return {"prompt_tokens": m.num_prompt_tokens, "completion_tokens": m.num_output_tokens,
            "total_tokens": m.num_prompt_tokens + m.num_output_tokens,
            "prompt_tokens_details": {"cached_tokens": m.num_cached_tokens}}


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
