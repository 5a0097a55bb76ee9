"""Before the app opens a chats file SQLite cannot read: ask whether to move it aside and start with no chats.

The chat app cannot paint a screen without its store (its chat list, its first chat), so this is a small app
of its own that `llmchat` runs first (tui/run.py): one question, Move aside (y) or Cancel (n). Moving aside
renames the file (core/chats/corruption.py: `chats.sqlite3.corrupt-<time>`, its -wal/-shm beside it) and never
deletes it, so a later repair (`sqlite3 FILE .recover`) still has every byte it had.
"""
from __future__ import annotations

from pathlib import Path

from textual.app import App

from ...core.chats.corruption import ChatsFileDamaged, move_aside
from ...core.text.sanitize import safe_text
from .dialogs import ConfirmScreen


def question(damage: ChatsFileDamaged) -> str:
    return (f"{damage.path} cannot be read ({damage.reason}). Move it aside (it is kept, renamed "
            f"{damage.path.name}.corrupt-<time>) and start with no chats?")


class MoveAsideApp(App[bool]):
    """Asks the one question; its return value is True when the user chose to move the file aside."""

    CSS_PATH = "../app.tcss"
    TITLE = "llmchat"

    def __init__(self, damage: ChatsFileDamaged) -> None:
        super().__init__()
        self.damage = damage

    def on_mount(self) -> None:
        self.push_screen(ConfirmScreen(safe_text(question(self.damage)), yes="Move aside"), self.exit)


def refusal(damage: ChatsFileDamaged) -> str:
    """The one line `llmchat` prints when the user keeps the file where it is."""
    return (f"llmchat: {damage.path} is damaged ({damage.reason}); nothing was changed. Start llmchat again and "
            "choose Move aside, or pass --data-dir OTHER_DIR")


def offer_move_aside(damage: ChatsFileDamaged, ask=None) -> Path | None:
    """Ask (a MoveAsideApp by default); the file's new name when it was moved aside, None when the user said no."""
    yes = ask(damage) if ask is not None else MoveAsideApp(damage).run()
    return move_aside(damage.path) if yes else None
