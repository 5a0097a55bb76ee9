"""A chat's settings that came after the `chats` table: top-k, seed, stop strings, and the model its ids are of.

They live in a table of their own beside `chats` (one row per chat, deleted with it), created if missing
whenever a store opens: a file without it reads as "defaults" (top-k off, no seed, no stop strings, model
not known), and an older llmchat opening a newer file simply does not see it. The rows <-> values mapping
of these columns is here; core/chats/store.py calls it inside its own transactions.
"""
from __future__ import annotations

import json
import sqlite3

from .conversation import ChatSettings
from .schema import has_table

TABLE = "chat_extras"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    chat_id INTEGER PRIMARY KEY REFERENCES chats(chat_id) ON DELETE CASCADE,
    top_k INTEGER NOT NULL DEFAULT 0,    -- 0: off
    seed INTEGER,                        -- NULL: a fresh random stream per reply
    stop TEXT NOT NULL DEFAULT '[]',     -- JSON list of stop strings
    model_id TEXT                        -- the model the chat's token ids are of; NULL: not known
)"""


def ensure_table(db: sqlite3.Connection) -> None:
    db.execute(_SCHEMA)


def save_settings(db: sqlite3.Connection, chat_id: int, s: ChatSettings) -> None:
    """The extra settings of one chat (its model_id, if any, stays)."""
    db.execute(f"INSERT INTO {TABLE} (chat_id, top_k, seed, stop) VALUES (?, ?, ?, ?) ON CONFLICT(chat_id) DO"
               " UPDATE SET top_k = excluded.top_k, seed = excluded.seed, stop = excluded.stop",
               (chat_id, s.top_k, s.seed, json.dumps(list(s.stop))))


def save_model(db: sqlite3.Connection, chat_id: int, model_id: str | None) -> None:
    db.execute(f"INSERT INTO {TABLE} (chat_id, model_id) VALUES (?, ?) ON CONFLICT(chat_id) DO"
               " UPDATE SET model_id = excluded.model_id", (chat_id, model_id))


def load(db: sqlite3.Connection, chat_id: int, settings: ChatSettings) -> str | None:
    """Fill `settings` with the chat's extra settings; returns its model_id (None: not known)."""
    if not has_table(db, TABLE):  # (a read-only look at a file this llmchat never opened for writing)
        return None
    row = db.execute(f"SELECT top_k, seed, stop, model_id FROM {TABLE} WHERE chat_id = ?", (chat_id,)).fetchone()
    if row is None:
        return None
    settings.top_k, settings.seed, settings.stop = row[0], row[1], tuple(json.loads(row[2]))
    return row[3]
