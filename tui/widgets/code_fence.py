"""A reply's Markdown whose fenced code blocks can be copied: a "copy" link above each block (click), or
focus the block (click it, or Tab to it) and press c. The code comes from the reply's own text
(tui/text/code_blocks.py: exact, control characters removed), not from what the screen shows."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownFence

from ..text.code_blocks import code_blocks


class CopyLink(Static):
    """The "copy" line above a code block; a click copies the block."""

    def on_click(self) -> None:
        self.query_ancestor(CopyableFence).action_copy_code()


class CopyableFence(MarkdownFence, can_focus=True):
    BINDINGS = [Binding("c", "copy_code", "Copy code block")]

    def compose(self) -> ComposeResult:
        yield CopyLink(self._link_text(), classes="copy-code")
        yield from super().compose()

    def _link_text(self) -> Content:
        language = self.lexer.split()[0] if self.lexer and self.lexer.split() else ""  # (shown text: already safe)
        return Content(f"{language} · ⧉ copy (c)" if language else "⧉ copy (c)")

    def set_content(self, content: Content) -> None:  # (a streaming reply updates a block in place)
        super().set_content(content)
        for link in self.query(CopyLink):
            link.update(self._link_text())

    def action_copy_code(self) -> None:
        markdown = self._markdown
        index = list(markdown.query(CopyableFence)).index(self)
        blocks = code_blocks(markdown.reply_text) if isinstance(markdown, ReplyMarkdown) else []
        if index >= len(blocks):  # (the screen and the text disagree: should not happen)
            self.notify("Could not find this code block in the reply's text", severity="warning")
            return
        code = blocks[index].code
        self.app.copy_to_clipboard(code)
        num_lines = code.count("\n") + 1 if code else 0
        self.notify(f"Copied code block {index + 1} ({num_lines:,} lines, {len(code):,} characters)", timeout=2)


class ReplyMarkdown(Markdown):
    """Markdown of a reply that knows the reply's raw text (the copy source; the shown text is sanitised)."""

    BLOCKS = {**Markdown.BLOCKS, "fence": CopyableFence}

    def __init__(self, shown: str, reply_text: str, **kwargs) -> None:
        super().__init__(shown, **kwargs)
        self.reply_text = reply_text
