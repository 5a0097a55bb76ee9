"""A modal that shows a block of text (an explanation, a check's result); Esc or q closes it."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, Static


class InfoScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "dismiss(None)", "Close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.body_text = text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label(Content(self.title_text), classes="dialog-title")
            yield Static(Content(self.body_text), id="info-text")
            yield Static(Content("Esc closes"), classes="hint")
