"""The message input: multi-line; Enter sends, Ctrl+J (or Shift/Alt+Enter where the terminal tells them
apart) adds a new line. A paste is sanitised on the way in, and a very large paste is kept aside as a
placeholder so a 1 MB paste never has to be laid out in the text area."""
from __future__ import annotations

import re

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from ...core.text.sanitize import safe_text
from ..actions.registry import prompt_bindings

NEWLINE_KEYS = ("ctrl+j", "shift+enter", "alt+enter")
LARGE_PASTE_CHARS = 8_000
_PLACEHOLDER = re.compile(r"\[paste #(\d+): [\d,]+ characters\]")


class PromptInput(TextArea):
    # (instead of TextArea's Ctrl+E, line end: End does that too); the config file's [keys] can move it
    BINDINGS = prompt_bindings()  # the editor (over TextArea's Ctrl+E, line end: End does that too), F6

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, **kwargs) -> None:
        super().__init__(
            soft_wrap=True, show_line_numbers=False, highlight_cursor_line=False, compact=True,
            placeholder="Message (Enter sends · Ctrl+J new line · Ctrl+P commands)", **kwargs,
        )
        self.pastes: dict[int, str] = {}

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.message_text()
            if text.strip():
                self.post_message(self.Submitted(text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
        # anything else: TextArea._on_key runs next (Textual dispatches handlers up the class hierarchy)

    async def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        event.prevent_default()
        text = safe_text(event.text)
        if len(text) > LARGE_PASTE_CHARS:
            number = len(self.pastes) + 1
            self.pastes[number] = text
            text = f"[paste #{number}: {len(text):,} characters]"
        self.insert(text)

    def message_text(self) -> str:
        """The text to send: what is typed, with each paste placeholder replaced by its paste."""
        return _PLACEHOLDER.sub(lambda m: self.pastes.get(int(m.group(1)), m.group(0)), self.text)

    def set_message(self, text: str) -> None:
        """Put a message back (e.g. one the engine refused), large parts as placeholders again."""
        self.pastes.clear()
        if len(text) > LARGE_PASTE_CHARS:
            self.pastes[1] = text
            text = f"[paste #1: {len(text):,} characters]"
        self.load_text(text)
        self.move_cursor(self.document.end)

    def clear_message(self) -> None:
        self.pastes.clear()
        self.load_text("")
