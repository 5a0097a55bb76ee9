"""Where the chats file lives, and the one-line summary of a chat the list shows (beside core/chats/store.py,
which re-exports both)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DB_NAME = "chats.sqlite3"


def default_data_dir() -> Path:
    """Where chats live unless --data-dir says otherwise: $LLMCHAT_DATA_DIR, else ~/.local/share/llmchat on Linux."""
    import platformdirs

    return Path(os.environ.get("LLMCHAT_DATA_DIR") or platformdirs.user_data_dir("llmchat")).expanduser()


@dataclass(slots=True)
class ChatSummary:
    chat_id: int
    title: str
    updated_at: float
    num_messages: int
