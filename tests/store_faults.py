"""A chats store whose disk fails on demand: the store's connection wrapped so that its writes (or its COMMIT)
raise what SQLite raises on a full or read-only disk. (Tests run as root, so chmod cannot make a file read-only,
and sqlite3.Connection's methods cannot be patched on the instance: hence a wrapper in its place.)"""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path

DISK_FULL = "database or disk is full"
READ_ONLY = "attempt to write a readonly database"
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class FailingDisk:
    """Stands in for the store's sqlite3.Connection; `at` is "write" (the first INSERT/UPDATE/DELETE of a
    transaction fails) or "commit" (every statement runs, then COMMIT fails: the store must roll back)."""

    def __init__(self, db: sqlite3.Connection, error: str, at: str = "write") -> None:
        self._db, self.error, self.at = db, error, at
        self.num_failures = 0

    def _check(self, sql: str) -> None:
        word = sql.lstrip().split()[0].upper()
        if word == "COMMIT" if self.at == "commit" else word in _WRITES:
            self.num_failures += 1
            raise sqlite3.OperationalError(self.error)

    def execute(self, sql, *args):
        self._check(sql)
        return self._db.execute(sql, *args)

    def executemany(self, sql, *args):
        self._check(sql)
        return self._db.executemany(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


@contextmanager
def failing_disk(store, error: str = DISK_FULL, at: str = "write"):
    """While inside, `store`'s writes fail as a full (or read-only) disk makes them fail."""
    real = store._db
    store._db = disk = FailingDisk(real, error, at)
    try:
        yield disk
    finally:
        store._db = real


def file_contents(path: Path) -> list[str]:
    """The chats file as SQL, read through a connection of its own (what another process would see)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(db.iterdump())
    finally:
        db.close()
