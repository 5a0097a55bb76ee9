"""How chats and messages map to SQLite values and rows: token ids as little-endian int32 blobs, metrics as
JSON (NaN as null), rows to the records of core/chats/conversation.py. core/chats/store.py does the SQL.

Reading a chat back checks what a later turn relies on (read_chat): a row that fails is DamagedChat, naming
what is wrong, so one damaged chat is skipped instead of failing the app later, mid-render or mid-turn."""
from __future__ import annotations

import json
import math
import sqlite3
import sys
from array import array
from dataclasses import fields

from .conversation import STATUSES, ChatSettings, Conversation, Message
from .corruption import DamagedChat
from ..api.metrics import RequestMetrics


def ids_to_blob(token_ids: list[int]) -> bytes:
    a = array("i", token_ids)
    assert a.itemsize == 4
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def blob_to_ids(blob: bytes) -> list[int]:
    if not isinstance(blob, bytes) or len(blob) % 4:
        raise ValueError(f"its token ids are {_what(blob)}, not int32s")
    a = array("i")
    a.frombytes(blob)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tolist()


def metrics_to_json(m: RequestMetrics | None) -> str | None:
    if m is None:
        return None
    values = {f.name: getattr(m, f.name) for f in fields(m)}
    return json.dumps({k: None if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()})


def metrics_from_json(text: str | None) -> RequestMetrics | None:
    if not text:
        return None
    raw = json.loads(text)
    kwargs = {}
    for f in fields(RequestMetrics):
        if f.name in raw:
            v = raw[f.name]
            kwargs[f.name] = float("nan") if v is None else v
    return RequestMetrics(**kwargs)


def _what(value: object) -> str:
    return f"a blob of {len(value)} bytes" if isinstance(value, bytes) else f"a {type(value).__name__}"


def message_from_row(row: sqlite3.Row) -> Message:
    if not isinstance(row["content"], str):
        raise ValueError(f"message {row['message_id']} has {_what(row['content'])} for its text")
    if row["role"] not in ("user", "assistant") or row["status"] not in STATUSES:
        raise ValueError(f"message {row['message_id']} has role {row['role']!r}, status {row['status']!r}")
    span = (row["token_start"], row["token_end"]) if row["token_start"] is not None else None
    return Message(
        row["role"], row["content"], row["status"], row["finish_reason"], row["error"],
        metrics_from_json(row["metrics"]), row["created_at"], row["message_id"], span,
    )


def conversation_from_row(row: sqlite3.Row, messages: list[Message]) -> Conversation:
    settings = ChatSettings(row["system_prompt"], row["temperature"], row["top_p"], row["max_tokens"])
    return Conversation(
        row["chat_id"], row["title"], bool(row["title_auto"]), row["created_at"], row["updated_at"],
        settings, blob_to_ids(row["token_ids"]), messages,
    )


def read_chat(row: sqlite3.Row, message_rows: list[sqlite3.Row]) -> Conversation:
    """A chat as stored, checked (ids, texts, roles, settings); DamagedChat says what is wrong with it."""
    try:
        chat = conversation_from_row(row, [message_from_row(r) for r in message_rows])
        chat.settings.check()
    except (ValueError, TypeError) as e:  # (json.JSONDecodeError is a ValueError)
        raise DamagedChat(row["chat_id"], str(e)) from None
    return chat


def span_columns(m: Message) -> tuple[int | None, int | None]:
    return m.token_span if m.token_span is not None else (None, None)
