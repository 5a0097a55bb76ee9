"""Chats on disk: SQLite (stdlib sqlite3, WAL) under the user data dir; rows <-> dataclasses through core/chats/rows.py.

One file, `chats.sqlite3`, holds every chat: its settings, its messages with per-turn metrics, the exact token ids
the model saw and produced (a restarted app continues with the same ids, which the prefix cache reuses), and each
message's span of them. The rules (titles, turn state) live in core/chats/conversation.py; this file maps rows to
those records and back, each change one transaction. One app owns a data dir at a time: a second one gets
DataDirInUse (read-only access, e.g. `llmchat export`, needs no lock). Message text is searchable across chats
(core/chats/search.py: an FTS5 index kept in step by triggers, built on open). A file SQLite cannot read is
ChatsFileDamaged, one chat that cannot be read back DamagedChat (core/chats/corruption.py); settings no turn can
use are refused (ValueError) before any SQL."""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import extras as store_extras, origin as chat_origin, schema, search as chat_search
from .corruption import ChatsFileDamaged, DamagedChat, check_header, damage_of  # noqa: F401 (callers import them here)
from .dirlock import DataDirInUse, lock_data_dir
from .private import make_private_dir, make_private_file
from .conversation import DEFAULT_TITLE, STATUSES, ChatSettings, Conversation, Message
from .rows import ids_to_blob, metrics_to_json, read_chat, span_columns
from .data_dir import DB_NAME, ChatSummary, default_data_dir  # noqa: F401 (callers import them from here)


class ChatStore:
    """The chats of one data dir. Methods are thread-safe (one connection behind a lock)."""

    def __init__(self, data_dir: Path | str, *, readonly: bool = False) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.readonly = readonly
        self.path = self.data_dir / DB_NAME
        self._lock = threading.RLock()
        self._lock_fd: int | None = None
        self._db: sqlite3.Connection | None = None
        try:
            self._open(readonly)
        except BaseException as e:  # (the data dir's lock goes too: the app may retry after a move_aside)
            self.close()
            if (damage := damage_of(e, self.path)) is None:
                raise
            raise damage from e

    def _open(self, readonly: bool) -> None:
        check_header(self.path)  # (before SQLite opens it: it would drop the -wal of a file it cannot read)
        if readonly:
            if not self.path.exists():
                raise FileNotFoundError(f"no chats in {self.data_dir} (no {DB_NAME}); check --data-dir")
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        else:
            make_private_dir(self.data_dir, tighten=self.path.exists())  # a folder the user named stays theirs
            self._lock_fd = lock_data_dir(self.data_dir)
            for suffix in ("", "-wal", "-shm"):  # SQLite gives -wal and -shm the db's mode (older ones: 0644)
                if not suffix or self.path.with_name(DB_NAME + suffix).exists():
                    make_private_file(self.path.with_name(DB_NAME + suffix))
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.execute("PRAGMA busy_timeout = 5000")
        if not readonly:
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
            store_extras.ensure_table(self._db)  # (beside the versioned schema: see core/chats/extras.py)
            chat_origin.ensure_table(self._db)  # (the same way: core/chats/origin.py)
            self._recover_interrupted()
            with self._tx() as db:
                self.search_uses_fts = chat_search.ensure_index(db)  # False: a LIKE scan (no FTS5 here)
        else:
            schema.check_version(self._db, self.path)
            self.search_uses_fts = chat_search.index_in_step(self._db)

    # -- lifecycle --------------------------------------------------------------------------
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
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # (a failed COMMIT too: never leave it open for later writes to join)
                    self._db.execute("ROLLBACK")
                raise

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Several changes as one transaction: all of them land, or none."""
        with self._tx():
            yield

    def _migrate(self) -> None:
        """A new file gets the schema; an older one is brought up to date in place, in one transaction."""
        if schema.check_version(self._db, self.path) != schema.SCHEMA_VERSION:
            with self._tx() as db:
                schema.migrate(db, self.path)

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

    # -- search -----------------------------------------------------------------------------
    def search_messages(self, text: str, limit: int = 50) -> list[chat_search.SearchHit]:
        """Messages of every chat that hold every word of `text` (chat_search.SearchError: one line)."""
        with self._lock:
            return chat_search.search(self._db, text, use_fts=self.search_uses_fts, limit=limit)

    # -- chats ------------------------------------------------------------------------------
    def create_chat(self, settings: ChatSettings | None = None, title: str | None = None) -> Conversation:
        t = time.time()
        with self._tx() as db:
            chat_id = self._insert_chat(db, Conversation(0, title or DEFAULT_TITLE, title is None, t, t,
                                                         settings or ChatSettings()))
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

    def load_chat(self, chat_id: int) -> Conversation:
        with self._lock:
            row = self._db.execute("SELECT * FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()
            if row is None:
                raise LookupError(f"no chat with id {chat_id}; the chat list shows each chat's id")
            rows = self._db.execute(
                "SELECT * FROM messages WHERE chat_id = ? ORDER BY message_id", (chat_id,)
            ).fetchall()
            conversation = read_chat(row, rows)  # DamagedChat: this one chat cannot be read back
            conversation.model_id = store_extras.load(self._db, chat_id, conversation.settings)
            conversation.origin = chat_origin.load(self._db, chat_id)
        conversation.store = self  # its changes persist themselves from now on
        return conversation

    def save_title(self, conversation: Conversation) -> None:
        """The chat's title as its record has it (Conversation.rename / retitle set it)."""
        with self._tx() as db:
            self._require(db.execute("UPDATE chats SET title = ?, title_auto = ? WHERE chat_id = ?",
                                     (conversation.title, int(conversation.title_auto),
                                      conversation.chat_id)), conversation.chat_id)

    def delete_chat(self, chat_id: int) -> None:
        with self._tx() as db:
            self._require(db.execute("DELETE FROM chats WHERE chat_id = ?", (chat_id,)), chat_id)

    def update_settings(self, chat_id: int, settings: ChatSettings) -> None:
        s = settings
        s.check()  # ValueError: NaN, 10**30 max tokens... (no IntegrityError, no OverflowError from sqlite3)
        with self._tx() as db:
            self._require(db.execute(
                "UPDATE chats SET system_prompt = ?, temperature = ?, top_p = ?, max_tokens = ? WHERE chat_id = ?",
                (s.system_prompt, s.temperature, s.top_p, s.max_tokens, chat_id),
            ), chat_id)
            store_extras.save_settings(db, chat_id, s)

    @staticmethod
    def _require(cur: sqlite3.Cursor, chat_id: int) -> None:
        if cur.rowcount == 0:
            raise LookupError(f"no chat with id {chat_id}")

    # -- messages and turns -----------------------------------------------------------------
    def add_messages(self, conversation: Conversation, *messages: Message) -> None:
        """Append messages (their ids are set) and the chat's title and activity time, in one transaction."""
        with self._tx() as db:
            for m in messages:
                m.message_id = self._insert_message(db, conversation.chat_id, m)
            self._save_header(db, conversation)

    def delete_messages(self, conversation: Conversation, *messages: Message) -> None:
        """Remove messages (a turn the engine refused) and save the chat's title as it is now."""
        with self._tx() as db:
            db.executemany("DELETE FROM messages WHERE message_id = ?", [(m.message_id,) for m in messages
                                                                          if m.message_id is not None])
            self._save_header(db, conversation)

    def truncate(self, conversation: Conversation, removed: list[Message]) -> None:
        """A chat cut short (edit, undo, regenerate): its removed messages, ids and title, in one transaction."""
        with self._tx() as db:
            db.executemany("DELETE FROM messages WHERE message_id = ?", [(m.message_id,) for m in removed
                                                                          if m.message_id is not None])
            db.execute("UPDATE chats SET token_ids = ? WHERE chat_id = ?",
                       (ids_to_blob(conversation.token_ids), conversation.chat_id))
            self._save_header(db, conversation)

    def add_chat(self, conversation: Conversation) -> Conversation:
        """Store a whole conversation (a fork or an import) as a new chat, in one transaction; returns it as stored."""
        with self._tx() as db:
            chat_id = self._insert_chat(db, conversation)
            for m in conversation.messages:
                self._insert_message(db, chat_id, m)
        return self.load_chat(chat_id)

    @staticmethod
    def _insert_chat(db: sqlite3.Connection, c: Conversation) -> int:
        """The chats row of `c` (its title, times, settings, ids) and its extras; returns the new chat id."""
        s = c.settings
        s.check()
        chat_id = db.execute(
            "INSERT INTO chats (title, title_auto, created_at, updated_at, system_prompt, temperature, top_p,"
            " max_tokens, token_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (c.title, int(c.title_auto), c.created_at, c.updated_at, s.system_prompt, s.temperature, s.top_p,
             s.max_tokens, ids_to_blob(c.token_ids)),
        ).lastrowid
        store_extras.save_settings(db, chat_id, s)
        store_extras.save_model(db, chat_id, c.model_id)
        chat_origin.save(db, chat_id, c.origin)
        return chat_id

    @staticmethod
    def _insert_message(db: sqlite3.Connection, chat_id: int, m: Message) -> int:
        assert m.role in ("user", "assistant") and m.status in STATUSES
        return db.execute(
            "INSERT INTO messages (chat_id, role, content, status, created_at, finish_reason, error, metrics,"
            " token_start, token_end) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (chat_id, m.role, m.content, m.status, m.created_at, m.finish_reason, m.error,
             metrics_to_json(m.metrics), *span_columns(m)),
        ).lastrowid

    def save_ids(self, conversation: Conversation) -> None:
        """The chat's ids, every message's span of them and the model they are of (a turn's prompt taken, a
        model switch), in one transaction."""
        with self._tx() as db:
            db.execute("UPDATE chats SET token_ids = ? WHERE chat_id = ?",
                       (ids_to_blob(conversation.token_ids), conversation.chat_id))
            db.executemany("UPDATE messages SET token_start = ?, token_end = ? WHERE message_id = ?",
                           [(*span_columns(m), m.message_id) for m in conversation.messages
                            if m.message_id is not None])
            store_extras.save_model(db, conversation.chat_id, conversation.model_id)

    def save_progress(self, conversation: Conversation, reply: Message) -> None:
        """A reply so far and the chat's ids so far (prompt + output), together: a crash keeps both."""
        with self._tx() as db:
            db.execute("UPDATE messages SET content = ?, token_start = ?, token_end = ? WHERE message_id = ?",
                       (reply.content, *span_columns(reply), reply.message_id))
            db.execute("UPDATE chats SET token_ids = ? WHERE chat_id = ?",
                       (ids_to_blob(conversation.token_ids), conversation.chat_id))

    def finish_turn(self, conversation: Conversation, reply: Message) -> None:
        """The final state of a reply (its content, status, metrics, span) and the chat's ids."""
        assert reply.message_id is not None and reply.status in STATUSES
        with self._tx() as db:
            db.execute(
                "UPDATE messages SET content = ?, status = ?, finish_reason = ?, error = ?, metrics = ?,"
                " token_start = ?, token_end = ? WHERE message_id = ?",
                (reply.content, reply.status, reply.finish_reason, reply.error, metrics_to_json(reply.metrics),
                 *span_columns(reply), reply.message_id),
            )
            db.execute("UPDATE chats SET token_ids = ? WHERE chat_id = ?",
                       (ids_to_blob(conversation.token_ids), conversation.chat_id))

    def save_origin(self, conversation: Conversation) -> None:
        """How the chat began (core/chats/origin.py), its first turn's metrics once they are known."""
        with self._tx() as db:
            chat_origin.save(db, conversation.chat_id, conversation.origin)

    @staticmethod
    def _save_header(db: sqlite3.Connection, c: Conversation) -> None:
        ChatStore._require(db.execute("UPDATE chats SET title = ?, title_auto = ?, updated_at = ? WHERE chat_id = ?",
                                      (c.title, int(c.title_auto), c.updated_at, c.chat_id)),
                           c.chat_id)
