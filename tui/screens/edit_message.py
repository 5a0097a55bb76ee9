"""Edit a message before resending it (the chat is cut there; the old branch is kept as a fork)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static, TextArea


class EditMessageScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "send", "Resend")]

    def __init__(self, text: str) -> None:
        super().__init__(classes="dialog-screen")
        self.body_text = text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label(Content("Edit and resend"), classes="dialog-title")
            yield TextArea(self.body_text, id="edited", soft_wrap=True, compact=True)
            yield Static(Content("The chat is cut at this message and continues with the new text; everything "
                                 "from here on is kept as a fork. Ctrl+S resends · Esc cancels"), classes="hint")
            with Horizontal(classes="buttons"):
                yield Button("Resend (ctrl+s)", variant="primary", id="send")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "send":
            self.action_send()
        else:
            self.dismiss(None)

    def action_send(self) -> None:
        self.dismiss(self.query_one(TextArea).text)
