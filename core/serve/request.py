"""The OpenAI request bodies `llmchat serve` accepts, checked field by field into SamplingParams.

A body that is not a JSON object, a field this server does not know, a value of the wrong type or out of
range: `ApiError` with a 400 status and a message that says the remedy (OpenAI's error JSON shape). Fields
OpenAI clients commonly send are accepted when their value is one this engine honours (`n` 1, penalties 0,
`logprobs` off); anything else is refused rather than silently ignored.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..api.params import DEFAULT_SAMPLING, SamplingParams
from ..text.reasoning import CLOSE, OPEN

MAX_BODY_BYTES = 8 << 20  # 8 MiB: a full context of text is far less
ROLES = ("system", "user", "assistant")


class ApiError(Exception):
    """An error for the client: HTTP status, OpenAI-style type, the offending field, one line of remedy."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


@dataclass(slots=True)
class ParsedRequest:
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False
    messages: list[dict] = field(default_factory=list)  # chat completions
    prompt: str | None = None  # completions


# field -> the values it may take here (None: any value, checked elsewhere)
_COMMON = {"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream", "stream_options",
           "user", "n", "frequency_penalty", "presence_penalty", "ignore_eos"}
_CHAT_ONLY = {"messages", "max_completion_tokens", "logprobs", "top_logprobs"}
_COMPLETION_ONLY = {"prompt", "logprobs", "echo"}
_DEFAULT_ONLY = {"n": (1,), "frequency_penalty": (0,), "presence_penalty": (0,), "logprobs": (False, None),
                 "top_logprobs": (0, None), "echo": (False,)}


async def read_capped_body(request) -> bytes:
    """The body of a Starlette request, refused with 413 as soon as it is known to pass MAX_BODY_BYTES: by its
    Content-Length before a byte is read, or (chunked) as it arrives; never held whole past the limit."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is {int(declared):,} bytes; the limit is {MAX_BODY_BYTES:,}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body passes the limit of {MAX_BODY_BYTES:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode_body(raw: bytes) -> dict:
    """The request body as a JSON object, or ApiError(400) saying what is wrong with it."""
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is {len(raw):,} bytes; the limit is {MAX_BODY_BYTES:,}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the request body is not valid UTF-8 (byte {e.start}); send UTF-8 JSON") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        where = f"line {e.lineno} column {e.colno}"
        raise ApiError(400, f"the request body is not valid JSON: {e.msg} at {where}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def parse_chat(body: dict, max_tokens_limit: int) -> ParsedRequest:
    _check_fields(body, _COMMON | _CHAT_ONLY)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects", "messages")
    parsed = _common(body, max_tokens_limit, "max_completion_tokens")
    parsed.messages = [_message(m, i) for i, m in enumerate(messages)]
    return parsed


def parse_completion(body: dict, max_tokens_limit: int) -> ParsedRequest:
    _check_fields(body, _COMMON | _COMPLETION_ONLY)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(400, "prompt must be a non-empty string (one prompt per request)", "prompt")
    parsed = _common(body, max_tokens_limit)
    parsed.prompt = prompt
    return parsed


def _check_fields(body: dict, known: set[str]) -> None:
    for name, value in body.items():
        if name not in known:
            raise ApiError(400, f"unknown field {name!r}; this server accepts {', '.join(sorted(known))}", name)
        allowed = _DEFAULT_ONLY.get(name)
        if allowed is not None and value not in allowed:
            raise ApiError(400, f"{name}={value!r} is not supported by this server; leave it out", name)


def _message(m: object, i: int) -> dict:
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise ApiError(400, f"{where} must be an object with role and content", where)
    extra = set(m) - {"role", "content", "name", "reasoning_content"}
    if extra:
        raise ApiError(400, f"{where} has unknown field(s) {', '.join(sorted(extra))}; send role and content", where)
    role, content = m.get("role"), m.get("content")
    if role not in ROLES:
        raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]: text parts only
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise ApiError(400, f"{where}.content: only text parts are supported", f"{where}.content")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise ApiError(400, f"{where}.content must be a string", f"{where}.content")
    reasoning = m.get("reasoning_content")
    if reasoning is not None and (role != "assistant" or not isinstance(reasoning, str)):
        raise ApiError(400, f"{where}.reasoning_content: a string, on an assistant message only", where)
    if reasoning:  # back into the reply's text, where the chat template applies its own rule to it
        content = f"{OPEN}{reasoning}{CLOSE}{content}"
    return {"role": role, "content": content}


def _common(body: dict, max_tokens_limit: int, alias: str | None = None) -> ParsedRequest:
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not (isinstance(options, dict) and set(options) <= {"include_usage"}):
        raise ApiError(400, "stream_options may only hold include_usage", "stream_options")
    include_usage = bool((options or {}).get("include_usage", False))
    name = alias if alias and body.get(alias) is not None else "max_tokens"
    max_tokens = body.get(name)
    if max_tokens is None:
        max_tokens = DEFAULT_SAMPLING.max_tokens
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= max_tokens_limit:
        raise ApiError(400, f"{name} must be a whole number from 1 to {max_tokens_limit:,} (the model's context), "
                            f"got {max_tokens!r}", name)
    max_tokens = min(max_tokens, max_tokens_limit)
    names = ("temperature", "top_p", "top_k", "seed", "stop", "ignore_eos")
    kwargs = {k: body[k] for k in names if body.get(k) is not None}
    if isinstance(kwargs.get("temperature"), float) and math.isnan(kwargs["temperature"]):
        raise ApiError(400, "temperature must be a number", "temperature")
    if isinstance(kwargs.get("stop"), list):
        kwargs["stop"] = tuple(kwargs["stop"])
    if "ignore_eos" in kwargs and not isinstance(kwargs["ignore_eos"], bool):
        raise ApiError(400, "ignore_eos must be true or false", "ignore_eos")
    try:
        params = SamplingParams(max_tokens=max_tokens, **{"temperature": 1.0, **kwargs})
    except (ValueError, TypeError) as e:
        raise ApiError(400, str(e), _param_of(str(e))) from None
    return ParsedRequest(params, stream, include_usage)


def _param_of(message: str) -> str | None:
    head = message.split(" ", 1)[0]
    return head if head.isidentifier() else None
