"""The app's own writes to the chats store, guarded, and the chats it opens at start, checked.

A full or read-only disk makes SQLite raise (sqlite3.OperationalError: "database or disk is full", "attempt to
write a readonly database"); the store has rolled that transaction back, so the file holds what it held before.
The app does not crash over it: what the user did stays in memory (a renamed title, new settings, a theme, a
new chat kept in memory only) and one notice says the change was not saved. Background writes of a streaming
reply post SaveFailed instead (tui/turns.py), shown here at most once in a while so a full disk is not a
notice per token. At start, a chat whose rows are damaged (core/chats/corruption.py: DamagedChat) is skipped
with one notice and the others open. A mixin of LlmChatApp.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from ...core.chats.conversation import ChatSettings, Conversation
from ...core.chats.corruption import DamagedChat
from ..messages import SaveFailed
from ..session import ChatSession
from .mixin import AppMixin

NOTICE_EVERY_S = 10.0  # a failing background write is told once in this long, not once per save


class StoreWrites(AppMixin):
    def memory_chat_id(self) -> int:
        """An id for a chat kept in memory only: negative, so never one the store hands out, and unused."""
        return min([0, *self.sessions]) - 1

    def saved(self, write: Callable[..., object], *args, what: str = "the change") -> bool:
        """Run one store write; False (and one notice) when the disk refused it: the change stays in memory."""
        try:
            write(*args)
        except sqlite3.Error as e:
            self.tell_not_saved(f"Could not save {what} to {self.store.path}: {e}. It is kept in memory only "
                                "until the app closes.")
            return False
        return True

    def tell_not_saved(self, line: str) -> None:
        self._last_write_error = time.monotonic()
        self.notify(line, severity="error", timeout=10, markup=False)

    def on_save_failed(self, msg: SaveFailed) -> None:
        if time.monotonic() - self._last_write_error > NOTICE_EVERY_S:  # once in a while, not per token
            self.tell_not_saved(f"Could not save to {msg.path}: {msg.error}. The chat goes on in memory.")

    def new_record(self, settings: ChatSettings) -> Conversation:
        """A new chat in the store; if the disk refuses, one kept in memory only (told once)."""
        try:
            return self.store.create_chat(settings)
        except sqlite3.Error as e:
            record = Conversation(self.memory_chat_id(), settings=settings)
            self.tell_not_saved(f"Could not save a new chat to {self.store.path}: {e}. Chat #{record.chat_id} "
                                "is kept in memory only (Ctrl+S exports it, to keep it).")
            return record

    def load_sessions(self) -> list[DamagedChat]:
        """Every chat of the store as a session; returns the chats skipped because their rows are damaged."""
        skipped = []
        for summary in self.store.list_chats():
            try:
                self.sessions[summary.chat_id] = ChatSession(self.store.load_chat(summary.chat_id))
            except DamagedChat as e:
                skipped.append(e)
        return skipped


def skipped_notice(skipped: list[DamagedChat]) -> str:
    """One notice for the damaged chats skipped at start."""
    if len(skipped) == 1:
        line = str(skipped[0])
        return f"{line[0].upper()}{line[1:]}; the other chats opened."
    return (f"Skipped {len(skipped)} damaged chats, left as they are in the file: "
            + "; ".join(f"#{e.chat_id} ({e.reason})" for e in skipped) + "; the other chats opened.")
