"""Chats on disk: SQLite (stdlib sqlite3, WAL) under the user data dir; rows <-> dataclasses here only.

One file, `chats.sqlite3`, holds every chat: its settings, its messages with per-turn metrics, and the
exact token ids the model saw and produced (so a restarted app continues with the same ids and the
prefix cache reuses them). Every change is one transaction. One app owns a data dir at a time: a
second one gets DataDirInUse (read-only access, e.g. `llmchat export`, needs no lock).
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path

from llmchat.core.metrics import RequestMetrics

SCHEMA_VERSION = 1
DB_NAME = "chats.sqlite3"
LOCK_NAME = "llmchat.lock"
DEFAULT_TITLE = "New chat"
TITLE_MAX_CHARS = 48

# Message status: done (finished normally), streaming (being written; becomes interrupted at the next
# open if the app died), stopped (the user pressed Esc or closed the app), error (cut short by the engine).
STATUSES = ("done", "streaming", "stopped", "interrupted", "error")

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
    metrics TEXT                         -- JSON of RequestMetrics (NaN as null), assistant turns only
);
CREATE INDEX IF NOT EXISTS messages_by_chat ON messages (chat_id, message_id);
"""


def default_data_dir() -> Path:
    """Where chats live unless --data-dir says otherwise (~/.local/share/llmchat on Linux)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("llmchat"))


class DataDirInUse(RuntimeError):
    """Another llmchat has this data dir open."""


@dataclass(slots=True)
class ChatSettings:
    system_prompt: str | None = None  # None: the model's default system prompt
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512


@dataclass(slots=True)
class StoredMessage:
    role: str  # "user" | "assistant"
    content: str
    status: str = "done"
    finish_reason: str | None = None
    error: str | None = None
    metrics: RequestMetrics | None = None
    created_at: float = field(default_factory=time.time)
    message_id: int | None = None


@dataclass(slots=True)
class ChatRecord:
    chat_id: int
    title: str
    title_auto: bool
    created_at: float
    updated_at: float
    settings: ChatSettings
    token_ids: list[int]
    messages: list[StoredMessage] = field(default_factory=list)


@dataclass(slots=True)
class ChatSummary:
    chat_id: int
    title: str
    updated_at: float
    num_messages: int


# -- rows <-> values --------------------------------------------------------------------------
def ids_to_blob(token_ids: list[int]) -> bytes:
    a = array("i", token_ids)
    assert a.itemsize == 4
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def blob_to_ids(blob: bytes) -> list[int]:
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


def title_from(text: str) -> str:
    """A chat title from its first message: the first non-empty line, whitespace collapsed, shortened."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if not line:
        return DEFAULT_TITLE
    return line if len(line) <= TITLE_MAX_CHARS else line[: TITLE_MAX_CHARS - 1].rstrip() + "…"


def _message(row: sqlite3.Row) -> StoredMessage:
    return StoredMessage(
        row["role"], row["content"], row["status"], row["finish_reason"], row["error"],
        metrics_from_json(row["metrics"]), row["created_at"], row["message_id"],
    )


def _record(row: sqlite3.Row, messages: list[StoredMessage]) -> ChatRecord:
    settings = ChatSettings(row["system_prompt"], row["temperature"], row["top_p"], row["max_tokens"])
    return ChatRecord(
        row["chat_id"], row["title"], bool(row["title_auto"]), row["created_at"], row["updated_at"],
        settings, blob_to_ids(row["token_ids"]), messages,
    )


class ChatStore:
    """The chats of one data dir. Methods are thread-safe (one connection behind a lock)."""

    def __init__(self, data_dir: Path | str, *, readonly: bool = False) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.readonly = readonly
        self.path = self.data_dir / DB_NAME
        self._lock = threading.RLock()
        self._lock_fd: int | None = None
        if readonly:
            if not self.path.exists():
                raise FileNotFoundError(f"no chats in {self.data_dir} (no {DB_NAME}); check --data-dir")
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._acquire_dir_lock()
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.execute("PRAGMA busy_timeout = 5000")
        if not readonly:
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
            self._recover_interrupted()
        else:
            self._check_version()

    # -- lifecycle --------------------------------------------------------------------------
    def _acquire_dir_lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # no flock (Windows): WAL keeps writes safe; two apps may still interleave
            return
        fd = os.open(self.data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DataDirInUse(
                f"{self.data_dir} is in use by another llmchat (pid {holder}); "
                "close that one, or start this one with --data-dir OTHER_DIR"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # closing the descriptor releases the flock
                self._lock_fd = None

    def __enter__(self) -> "ChatStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK if the block raises; inside batch() it joins that one."""
        with self._lock:
            if self._db.in_transaction:  # within batch(): one transaction for all
                yield self._db
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Several changes as one transaction: all of them land, or none."""
        with self._tx():
            yield

    def _check_version(self) -> int:
        row = self._db.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'"
        ).fetchone() if self._has_table("meta") else None
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.path} was written by a newer llmchat (schema {version}); upgrade llmchat to open it"
            )
        return version

    def _has_table(self, name: str) -> bool:
        return self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None

    def _migrate(self) -> None:
        if self._check_version() == SCHEMA_VERSION:
            return
        with self._tx() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def _recover_interrupted(self) -> None:
        """A reply still 'streaming' at open belonged to an app that died: keep it, marked interrupted."""
        with self._tx() as db:
            db.execute("UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'")

    # -- app settings -----------------------------------------------------------------------
    def get_setting(self, key: str, default: str | None = None) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (f"app.{key}",)).fetchone()
        return row[0] if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"app.{key}", value))

    # -- chats ------------------------------------------------------------------------------
    def create_chat(self, settings: ChatSettings | None = None, title: str | None = None) -> ChatRecord:
        s = settings or ChatSettings()
        t = time.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO chats (title, title_auto, created_at, updated_at, system_prompt, temperature, top_p,"
                " max_tokens, token_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (title or DEFAULT_TITLE, int(title is None), t, t, s.system_prompt, s.temperature, s.top_p,
                 s.max_tokens, ids_to_blob([])),
            )
            chat_id = cur.lastrowid
        return self.load_chat(chat_id)

    def list_chats(self) -> list[ChatSummary]:
        """Every chat, most recently active first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT c.chat_id, c.title, c.updated_at, COUNT(m.message_id) AS n FROM chats c"
                " LEFT JOIN messages m ON m.chat_id = c.chat_id GROUP BY c.chat_id"
                " ORDER BY c.updated_at DESC, c.chat_id DESC"
            ).fetchall()
        return [ChatSummary(r["chat_id"], r["title"], r["updated_at"], r["n"]) for r in rows]

    def load_chat(self, chat_id: int) -> ChatRecord:
        with self._lock:
            row = self._db.execute("SELECT * FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()
            if row is None:
                raise LookupError(f"no chat with id {chat_id}; the chat list shows each chat's id")
            rows = self._db.execute(
                "SELECT * FROM messages WHERE chat_id = ? ORDER BY message_id", (chat_id,)
            ).fetchall()
        return _record(row, [_message(r) for r in rows])

    def rename_chat(self, chat_id: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise ValueError("a chat title cannot be empty")
        with self._tx() as db:
            self._require(db.execute("UPDATE chats SET title = ?, title_auto = 0 WHERE chat_id = ?", (title, chat_id)), chat_id)

    def delete_chat(self, chat_id: int) -> None:
        with self._tx() as db:
            self._require(db.execute("DELETE FROM chats WHERE chat_id = ?", (chat_id,)), chat_id)

    def update_settings(self, chat_id: int, settings: ChatSettings) -> None:
        s = settings
        with self._tx() as db:
            self._require(db.execute(
                "UPDATE chats SET system_prompt = ?, temperature = ?, top_p = ?, max_tokens = ? WHERE chat_id = ?",
                (s.system_prompt, s.temperature, s.top_p, s.max_tokens, chat_id),
            ), chat_id)

    @staticmethod
    def _require(cur: sqlite3.Cursor, chat_id: int) -> None:
        if cur.rowcount == 0:
            raise LookupError(f"no chat with id {chat_id}")

    # -- messages and turns -----------------------------------------------------------------
    def add_message(self, chat_id: int, message: StoredMessage) -> int:
        """Append a message; the first user message titles an untitled chat. Returns its id."""
        assert message.role in ("user", "assistant") and message.status in STATUSES
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO messages (chat_id, role, content, status, created_at, finish_reason, error, metrics)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (chat_id, message.role, message.content, message.status, message.created_at, message.finish_reason,
                 message.error, metrics_to_json(message.metrics)),
            )
            message.message_id = cur.lastrowid
            db.execute("UPDATE chats SET updated_at = ? WHERE chat_id = ?", (time.time(), chat_id))
            if message.role == "user":
                first = db.execute(
                    "SELECT COUNT(*) FROM messages WHERE chat_id = ? AND role = 'user'", (chat_id,)
                ).fetchone()[0] == 1
                if first:
                    db.execute(
                        "UPDATE chats SET title = ? WHERE chat_id = ? AND title_auto = 1",
                        (title_from(message.content), chat_id),
                    )
        return message.message_id

    def delete_message(self, message_id: int) -> None:
        """Remove a message (a turn the engine refused); an untitled chat is re-titled from what remains."""
        with self._tx() as db:
            row = db.execute("SELECT chat_id FROM messages WHERE message_id = ?", (message_id,)).fetchone()
            if row is None:
                return
            db.execute("DELETE FROM messages WHERE message_id = ?", (message_id,))
            first = db.execute(
                "SELECT content FROM messages WHERE chat_id = ? AND role = 'user' ORDER BY message_id LIMIT 1",
                (row[0],),
            ).fetchone()
            db.execute(
                "UPDATE chats SET title = ? WHERE chat_id = ? AND title_auto = 1",
                (title_from(first[0]) if first else DEFAULT_TITLE, row[0]),
            )

    def save_progress(self, chat_id: int, message_id: int, content: str, token_ids: list[int]) -> None:
        """A reply so far and the chat's ids so far (prompt + output), together: a crash keeps both."""
        with self._tx() as db:
            db.execute("UPDATE messages SET content = ? WHERE message_id = ?", (content, message_id))
            db.execute("UPDATE chats SET token_ids = ? WHERE chat_id = ?", (ids_to_blob(token_ids), chat_id))

    def finish_turn(self, chat_id: int, message: StoredMessage, token_ids: list[int]) -> None:
        """The final state of a reply (content, status, metrics) and the chat's ids, in one transaction."""
        assert message.message_id is not None and message.status in STATUSES
        with self._tx() as db:
            db.execute(
                "UPDATE messages SET content = ?, status = ?, finish_reason = ?, error = ?, metrics = ?"
                " WHERE message_id = ?",
                (message.content, message.status, message.finish_reason, message.error,
                 metrics_to_json(message.metrics), message.message_id),
            )
            db.execute("UPDATE chats SET token_ids = ? WHERE chat_id = ?", (ids_to_blob(token_ids), chat_id))
