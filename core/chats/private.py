"""Chats are private: their folder 0700, their files 0600, whatever the umask.

The data dir holds every message the user wrote; with the usual umask 022 a plain `mkdir` and `sqlite3.connect`
leave it readable by every account on the machine. These helpers create (and tighten) what llmchat owns.
"""
from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def make_private_dir(path: Path, *, tighten: bool = True) -> None:
    """Create `path` (and its parents) 0700; with `tighten`, an existing one is set to 0700 too."""
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    if created or tighten:
        os.chmod(path, PRIVATE_DIR)


def make_private_file(path: Path) -> None:
    """Create `path` empty with 0600, or set an existing one to 0600 (its contents untouched)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
    os.chmod(path, PRIVATE_FILE)


def write_private_text(path: Path, text: str) -> None:
    """Write `text` to `path`; a new file is created 0600, an existing one keeps its mode (the user chose it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)
