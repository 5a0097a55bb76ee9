"""The chats file's schema, its version and the migrations that bring an older file up to date (core/chats/store.py
runs them in its own transaction when it opens a file for writing)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA_VERSION = 2  # 2: messages.token_start/token_end (the span of the chat's ids a message added)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chats (
    chat_id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    title_auto INTEGER NOT NULL,         -- 1: follows the first user message, 0: renamed by the user
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    system_prompt TEXT,                  -- NULL: the model default
    temperature REAL NOT NULL,
    top_p REAL NOT NULL,
    max_tokens INTEGER NOT NULL,
    token_ids BLOB NOT NULL              -- int32 little-endian: every id fed to and produced by the model
);
CREATE TABLE IF NOT EXISTS messages (
    message_id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL REFERENCES chats(chat_id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    finish_reason TEXT,
    error TEXT,
    metrics TEXT,                        -- JSON of RequestMetrics (NaN as null), assistant turns only
    token_start INTEGER,                 -- [token_start, token_end) of chats.token_ids, NULL if not known
    token_end INTEGER
);
CREATE INDEX IF NOT EXISTS messages_by_chat ON messages (chat_id, message_id);
"""
_MIGRATIONS = {  # from version N to N + 1
    1: ["ALTER TABLE messages ADD COLUMN token_start INTEGER", "ALTER TABLE messages ADD COLUMN token_end INTEGER"],
}


def has_table(db: sqlite3.Connection, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def check_version(db: sqlite3.Connection, path: Path) -> int:
    """The file's schema version (0: a new file); a newer one than this llmchat knows is refused."""
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() if has_table(db, "meta") else None
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"{path} was written by a newer llmchat (schema {version}); upgrade llmchat to open it")
    return version


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Create the schema in a new file, or run the migrations from the file's version on (inside a transaction)."""
    version = check_version(db, path)
    if version == 0 or not has_table(db, "chats"):
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
    else:
        for v in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[v]:
                db.execute(statement)
    db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
