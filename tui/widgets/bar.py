"""A horizontal bar split into parts proportional to counts; each part's colour comes from app.tcss."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static


class SplitBar(Horizontal):
    def __init__(self, parts: tuple[str, ...], **kwargs) -> None:
        super().__init__(**kwargs)
        self.parts = parts
        self.add_class("split-bar")

    def compose(self) -> ComposeResult:
        for name in self.parts:
            yield Static(classes=f"part -{name}")

    def set_counts(self, counts: tuple[int, ...]) -> None:
        assert len(counts) == len(self.parts)
        for child, n in zip(self.query(".part"), counts):
            child.display = n > 0
            if n > 0:
                child.styles.width = f"{n}fr"
