"""Chats back from llmchat's own exports (tui/commands/export.py): JSON with token ids, or Markdown as text only.

A JSON export carries the exact ids the model saw and produced (`token_ids`) and, from this version
on, each message's span of them: the imported chat's next turn extends those ids, so its prompt is the
original's bit for bit and reuses the same cached KV. A Markdown export has only text: the chat's ids
start empty and its next turn tokenizes the whole history afresh (the prefix cache still reuses
whatever blocks match).

Everything is checked before anything is stored (ChatImportError: one line naming what is wrong);
ChatStore.import_chat then writes the chat in one transaction. Torch-free.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from .conversation import MAX_SEED, MAX_STOP_STRINGS, STATUSES, ChatSettings, Conversation, Message
from .rows import metrics_from_json

MAX_TOKEN_ID = 2**31 - 1  # the store keeps ids as int32


class ChatImportError(ValueError):
    """A file that is not an llmchat export, or a broken one; str() is the one line to show."""


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _need(ok: bool, where: str, wanted: str, value: object) -> None:
    if not ok:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ChatImportError(f"{where} must be {wanted}, not {shown}")


def _optional_str(d: dict, key: str, where: str) -> str | None:
    value = d.get(key)
    _need(value is None or isinstance(value, str), f"{where}.{key}", "a string or null", value)
    return value


def _settings(raw: object) -> ChatSettings:
    _need(isinstance(raw, dict), "settings", "an object", raw)
    d = ChatSettings()
    s = ChatSettings(_optional_str(raw, "system_prompt", "settings"), raw.get("temperature", d.temperature),
                     raw.get("top_p", d.top_p), raw.get("max_tokens", d.max_tokens))
    _need(_number(s.temperature) and s.temperature >= 0, "settings.temperature", "a number >= 0", s.temperature)
    _need(_number(s.top_p) and 0 < s.top_p <= 1, "settings.top_p", "a number in (0, 1]", s.top_p)
    _need(isinstance(s.max_tokens, int) and not isinstance(s.max_tokens, bool) and s.max_tokens > 0,
          "settings.max_tokens", "a positive integer", s.max_tokens)
    s.top_k, s.seed, s.stop = raw.get("top_k", 0), raw.get("seed"), raw.get("stop", [])
    _need(isinstance(s.top_k, int) and not isinstance(s.top_k, bool) and s.top_k >= 0,
          "settings.top_k", "an integer >= 0", s.top_k)
    _need(s.seed is None or isinstance(s.seed, int) and not isinstance(s.seed, bool) and 0 <= s.seed <= MAX_SEED,
          "settings.seed", f"null or an integer from 0 to {MAX_SEED}", s.seed)
    _need(isinstance(s.stop, list) and len(s.stop) <= MAX_STOP_STRINGS and all(isinstance(x, str) and x for x in s.stop),
          "settings.stop", f"a list of at most {MAX_STOP_STRINGS} non-empty strings", s.stop)
    s.stop = tuple(s.stop)
    return s


def _token_ids(raw: object) -> list[int]:
    _need(isinstance(raw, list), "token_ids", "a list of integers", raw)
    for i, t in enumerate(raw):
        _need(isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN_ID, f"token_ids[{i}]",
              "a token id (an integer >= 0)", t)
    return raw


def _message(raw: object, i: int, num_ids: int) -> Message:
    where = f"messages[{i}]"
    _need(isinstance(raw, dict), where, "an object", raw)
    role, content, status = raw.get("role"), raw.get("content"), raw.get("status", "done")
    _need(role in ("user", "assistant"), f"{where}.role", "'user' or 'assistant'", role)
    _need(isinstance(content, str), f"{where}.content", "a string", content)
    _need(status in STATUSES, f"{where}.status", " or ".join(STATUSES), status)
    created_at = raw.get("created_at", 0.0)
    _need(_number(created_at), f"{where}.created_at", "a number", created_at)
    metrics = raw.get("metrics")
    _need(metrics is None or isinstance(metrics, dict), f"{where}.metrics", "an object or null", metrics)
    try:
        metrics = metrics_from_json(json.dumps(metrics)) if metrics else None
    except (TypeError, ValueError) as e:
        raise ChatImportError(f"{where}.metrics is not llmchat's ({e})") from None
    span = raw.get("token_span")
    if span is not None:
        _need(isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span)
              and 0 <= span[0] <= span[1] <= num_ids, f"{where}.token_span",
              f"[start, end] within the {num_ids:,} token ids", span)
        span = (span[0], span[1])
    return Message(role, content, "interrupted" if status == "streaming" else status,
                   _optional_str(raw, "finish_reason", where), _optional_str(raw, "error", where), metrics,
                   float(created_at), None, span)


def conversation_from_json(text: str) -> Conversation:
    """The chat of an llmchat JSON export (chat_id 0 until stored)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ChatImportError(f"not valid JSON: {e}") from None
    if not (isinstance(raw, dict) and "messages" in raw and "token_ids" in raw):
        raise ChatImportError("not an llmchat JSON export (an object with 'messages' and 'token_ids')")
    title = raw.get("title")
    _need(isinstance(title, str) and title.strip() != "", "title", "a non-empty string", title)
    token_ids = _token_ids(raw["token_ids"])
    _need(isinstance(raw["messages"], list), "messages", "a list", raw["messages"])
    messages = [_message(m, i, len(token_ids)) for i, m in enumerate(raw["messages"])]
    times = [raw.get(k, 0.0) for k in ("created_at", "updated_at")]
    for key, value in zip(("created_at", "updated_at"), times):
        _need(_number(value), key, "a number", value)
    model_id = _optional_str(raw, "model_id", "export")
    return Conversation(0, title, False, float(times[0]), float(times[1]), _settings(raw.get("settings", {})),
                        token_ids, messages, model_id)


_SECTION = re.compile(r"^## (System|User|Assistant)$")
_SETTINGS_LINE = re.compile(r"^temperature (\S+) · top-p (\S+) · max tokens ([\d,]+) · ")
_NOTE = re.compile(r"^\*(.+)\*$")


def conversation_from_markdown(text: str) -> Conversation:
    """The chat of an llmchat Markdown export, as text only (no token ids; notes under replies dropped)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# ") or not lines[0][2:].strip():
        raise ChatImportError("not an llmchat Markdown export: the first line must be '# <title>'")
    settings, sections, current = ChatSettings(), [], None
    for line in lines[1:]:
        heading = _SECTION.match(line)
        if heading:
            current = [heading.group(1).lower(), []]
            sections.append(current)
        elif current is not None:
            current[1].append(line)
        elif m := _SETTINGS_LINE.match(line):
            try:
                settings = ChatSettings(None, float(m.group(1)), float(m.group(2)), int(m.group(3).replace(",", "")))
            except ValueError:
                raise ChatImportError(f"the settings line is not llmchat's: {line[:60]!r}") from None
    if not any(role != "system" for role, _ in sections):
        raise ChatImportError("not an llmchat Markdown export: no '## User' or '## Assistant' section")
    messages = []
    for role, body in sections:
        while body and not body[-1].strip():
            body.pop()
        if role == "assistant" and body and _NOTE.match(body[-1]) and (len(body) == 1 or not body[-2].strip()):
            body.pop()  # the reply's metrics/status note
        content = "\n".join(body).strip("\n")
        if role == "system":
            settings.system_prompt = content or None
        else:
            messages.append(Message(role, content))
    return Conversation(0, lines[0][2:].strip(), False, settings=settings, messages=messages)


def read_chat_file(path: Path) -> Conversation:
    """The chat in an export file: JSON by its .json suffix or a leading '{', Markdown otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ChatImportError(f"cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        return conversation_from_json(text)
    return conversation_from_markdown(text)
