"""A chats file SQLite cannot read, and one chat whose rows are damaged: named, never silently "repaired".

A `chats.sqlite3` that is not a database at all (or whose pages are malformed) makes ChatStore raise
ChatsFileDamaged: one line naming the file and the remedy. The app offers to move the file aside (see
move_aside: renamed, never deleted, its -wal/-shm beside it) and start with no chats; `llmchat export`
says so and exits 2. One chat whose row cannot be read back (a token blob of the wrong length, a message
with no text, settings no turn can use) raises DamagedChat from ChatStore.load_chat: the app skips that chat
with a notice and opens the others; the file is left exactly as it was.
"""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

# SQLite's primary result codes for "this is not what a database file looks like"
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
SUFFIXES = ("", "-wal", "-shm")  # the database and the files SQLite keeps beside it


class ChatsFileDamaged(RuntimeError):
    """The chats file cannot be read as a database; `path` is that file."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} is damaged ({reason}); start `llmchat` to move it aside and begin with no "
                         f"chats (the file is kept, renamed {path.name}.corrupt-<time>), or pass another --data-dir")
        self.path = path
        self.reason = reason


class DamagedChat(ValueError):
    """One chat's rows cannot be read back; the other chats are fine."""

    def __init__(self, chat_id: int, reason: str) -> None:
        super().__init__(f"chat #{chat_id} is damaged ({reason}); it was skipped and left as it is in the file")
        self.chat_id = chat_id
        self.reason = reason


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def check_header(path: Path) -> None:
    """ChatsFileDamaged unless `path` is missing, empty or starts as a SQLite file does. Checked before SQLite
    opens it: SQLite, closing a connection to a file it cannot read, deletes the -wal beside it."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    if head and head != SQLITE_HEADER:
        raise ChatsFileDamaged(path, "file is not a database")


def is_damage(error: BaseException) -> bool:
    """True for SQLite's "not a database" / "malformed" errors; False for locks, full disks, constraints."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    return "not a database" in str(error) or "malformed" in str(error)


def damage_of(error: BaseException, path: Path) -> ChatsFileDamaged | None:
    """ChatsFileDamaged for an error met while reading `path` that says the file is damaged; None for any other."""
    return ChatsFileDamaged(path, str(error)) if is_damage(error) else None


def move_aside(path: Path, now: float | None = None) -> Path:
    """Rename the damaged file (and its -wal/-shm, if any) to `<name>.corrupt-<YYYYmmdd-HHMMSS>`; returns the
    new name of the file. Nothing is deleted; a name already taken gets a counter."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    base, n = path.with_name(f"{path.name}.corrupt-{stamp}"), 1
    while any(base.with_name(base.name + s).exists() for s in SUFFIXES):
        n += 1
        base = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    for suffix in SUFFIXES:
        src = path.with_name(path.name + suffix)
        if src.exists():
            src.rename(base.with_name(base.name + suffix))
    return base
