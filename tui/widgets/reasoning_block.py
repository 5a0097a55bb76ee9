"""A reply's reasoning (`<think>…</think>`, split by core/text/reasoning.py) as a collapsible block above its
answer: open while it streams, collapsed once the reply ends; Alt+R (or r on a focused reply) toggles it. The
text is plain (safe_text), never markup."""
from __future__ import annotations

from textual.content import Content
from textual.widgets import Collapsible, Static

from ...core.text.sanitize import safe_text
from ..text import format as fmt


def reasoning_title(num_tokens: int | None, num_chars: int, streaming: bool) -> str:
    """"Thinking… 40 tokens" while it streams, "Thought for 212 tokens" after; a stored reply's token count is not
    known (a reply loaded from the store), so it says how long the text is."""
    if streaming:
        return f"Thinking… {num_tokens:,} tokens" if num_tokens else "Thinking…"
    if num_tokens is not None:
        return f"Thought for {num_tokens:,} token{'s' if num_tokens != 1 else ''}"
    return f"Reasoning · {num_chars:,} characters"


def shown_reasoning(text: str) -> str:
    head, note = fmt.cut_for_display(text.strip("\n"))
    return safe_text(head) + note


class ReasoningBlock(Collapsible):
    """Hidden while the reply has no reasoning; `show` sets its text and title."""

    def __init__(self, text: str = "", title: str = "Thinking…", collapsed: bool = True) -> None:
        self._text = text
        super().__init__(Static(Content(shown_reasoning(text)), classes="reasoning-text"), title=title,
                         collapsed=collapsed, classes="reasoning")
        self.display = bool(text)

    @property
    def text(self) -> str:
        return self._text

    def show(self, text: str, title: str) -> None:
        if text != self._text:
            self._text = text
            for body in self.query(".reasoning-text"):
                body.update(Content(shown_reasoning(text)))
        self.title = title
        self.display = bool(text)

    def toggle(self) -> None:
        self.collapsed = not self.collapsed

    def _watch_collapsed(self, collapsed: bool) -> None:
        """As Collapsible's, without its scroll_visible: collapsing a finished reply's block must not pull a
        transcript that follows the stream back up to it."""
        self._update_collapsed(collapsed)
        self.post_message(self.Collapsed(self) if collapsed else self.Expanded(self))
