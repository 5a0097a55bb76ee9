"""How a chat began when it continued another that outgrew the context (issue 27 item 5): which chat, by which
choice (a summary the model wrote, the oldest turns dropped, a fork), the price the choice showed, and what it
measured: the summary request's metrics and the new chat's first turn's.

A table of its own beside `chats` (one row per continued chat, deleted with it), created if missing whenever a
store opens, like core/chats/extras.py: a file without it reads as "no origin", and an older llmchat opening a
newer file simply does not see it. The row is written with the new chat (ChatStore.add_chat) and once more when
its first turn finishes (ChatStore.save_origin). core/chats/store.py calls these inside its own transactions.
"""
from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

from ..api.metrics import RequestMetrics
from .schema import has_table

HOWS = ("summary", "trim", "fork")
TABLE = "chat_origins"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    chat_id INTEGER PRIMARY KEY REFERENCES chats(chat_id) ON DELETE CASCADE,
    from_chat_id INTEGER NOT NULL,       -- the full chat (kept as it was; it may be deleted later)
    how TEXT NOT NULL,                   -- summary | trim | fork
    num_start_messages INTEGER NOT NULL, -- messages the chat began with (its first turn comes after them)
    estimated_tokens INTEGER NOT NULL,   -- the price the choice showed: tokens to prefill (and write)
    estimated_seconds REAL,              -- NULL: no rate measured yet
    summary_metrics TEXT,                -- JSON of the summary request's RequestMetrics (how = summary)
    first_turn_metrics TEXT              -- JSON of the first reply's RequestMetrics, once it finished
)"""


@dataclass(frozen=True, slots=True)
class ChatOrigin:
    from_chat_id: int
    how: str  # one of HOWS
    num_start_messages: int
    estimated_tokens: int
    estimated_seconds: float  # NaN: no rate was measured when the choice was priced
    summary: RequestMetrics | None = None  # the summary request as it ran
    first_turn: RequestMetrics | None = None  # the chat's first reply, once it finished

    def __post_init__(self) -> None:
        assert self.how in HOWS, self.how


def ensure_table(db: sqlite3.Connection) -> None:
    db.execute(_SCHEMA)


def save(db: sqlite3.Connection, chat_id: int, o: ChatOrigin | None) -> None:
    """The chat's origin row (None: a chat that began on its own has none)."""
    from .rows import metrics_to_json  # (here: rows imports conversation, which imports this module)

    if o is None:
        return
    seconds = None if math.isnan(o.estimated_seconds) else o.estimated_seconds
    db.execute(f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (chat_id, o.from_chat_id, o.how, o.num_start_messages, o.estimated_tokens, seconds,
                metrics_to_json(o.summary), metrics_to_json(o.first_turn)))


def load(db: sqlite3.Connection, chat_id: int) -> ChatOrigin | None:
    """The chat's origin; None for a chat that began on its own (or a file from before this table)."""
    from .rows import metrics_from_json

    if not has_table(db, TABLE):  # (a read-only look at a file this llmchat never opened for writing)
        return None
    row = db.execute(f"SELECT from_chat_id, how, num_start_messages, estimated_tokens, estimated_seconds,"
                     f" summary_metrics, first_turn_metrics FROM {TABLE} WHERE chat_id = ?", (chat_id,)).fetchone()
    if row is None or row[1] not in HOWS:
        return None
    return ChatOrigin(row[0], row[1], row[2], row[3], math.nan if row[4] is None else row[4],
                      metrics_from_json(row[5]), metrics_from_json(row[6]))
