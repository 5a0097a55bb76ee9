"""While the model writes the summary a full chat continues from (tui/actions/chat_summary.py): the text so far and
its token count; the stop key (Esc) or the button cancels it, and then nothing is created."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from ...core.text.sanitize import safe_text
from ..actions.registry import stop_binding

SHOWN_CHARS = 1200  # the end of the summary so far, as it streams


class SummaryProgressScreen(ModalScreen[None]):
    """The app's stop key (Esc unless the config file moved it) cancels the summary."""

    BINDINGS = [stop_binding()]

    def __init__(self, title: str) -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label(Content(self.title_text), classes="dialog-title")
            yield Static(Content("waiting for the engine (queue + prefill)…"), id="summary-progress")
            yield Static(Content(""), id="summary-text")
            yield Button(Content("Cancel (Esc): nothing is created, the chat and your message stay"), id="cancel")

    def show(self, text: str, num_tokens: int, max_tokens: int, stopping: bool) -> None:
        if not self.is_mounted:
            return
        state = "stopping…" if stopping else f"{num_tokens:,} of ≤{max_tokens:,} tokens written · Esc cancels"
        self.query_one("#summary-progress", Static).update(Content(state))
        self.query_one("#summary-text", Static).update(Content(safe_text(text[-SHOWN_CHARS:])))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.app.action_stop()
