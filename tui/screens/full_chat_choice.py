"""The choice when a message does not fit the chat's context (tui/text/full_chat.py prices each option)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ..text.full_chat import Choice


class FullChatChoiceScreen(ModalScreen[Choice | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Keep the chat as it is")]

    def __init__(self, question: str, choices: list[Choice]) -> None:
        super().__init__(classes="dialog-screen")
        self.question, self.choices = question, choices

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Static(Content(self.question), classes="question")
            for i, choice in enumerate(self.choices):
                yield Button(Content(f"{i + 1}. {choice.text}"), id=f"choice-{choice.kind}", classes="choice")
            yield Button(Content("Keep the chat as it is (Esc); the message stays in the box"), id="keep",
                         classes="choice")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "keep":
            self.dismiss(None)
        else:
            kind = event.button.id.removeprefix("choice-")
            self.dismiss(next(choice for choice in self.choices if choice.kind == kind))
