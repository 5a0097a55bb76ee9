"""Search every chat (Ctrl+F): type words, pick a message; its chat opens at that message.

The store answers (core/chats/search.py: FTS5, or a LIKE scan where this SQLite lacks FTS5); each hit
shows its chat's title and the matching words with some context. Everything shown is safe_text.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ...core.chats.search import NO_FTS5_LINE, SearchError, SearchHit
from ...core.text.sanitize import safe_text

if TYPE_CHECKING:
    from ...core.chats.store import ChatStore

NUM_HITS_SHOWN = 50
HINT = "Enter opens the first match · ↓ and Enter pick another · Esc closes"


def hit_prompt(hit: SearchHit) -> Content:
    """Two lines: '#id title · role', then the snippet with the matched words in bold."""
    head = Content.assemble((f"#{hit.chat_id} {safe_text(hit.chat_title)}", "bold"), f" · {hit.role}")
    snippet = Content.assemble(*[(safe_text(re.sub(r"\s+", " ", text)), "bold reverse" if is_match else "")
                                 for text, is_match in hit.snippet])
    return Content.assemble(head, "\n", snippet)


class SearchScreen(ModalScreen[SearchHit | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]

    def __init__(self, store: "ChatStore", text: str = "") -> None:
        super().__init__(classes="dialog-screen")
        self.store = store
        self.initial_text = self.last_text = text
        self.hits: list[SearchHit] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide", id="search"):
            yield Label(Content("Search all chats"), classes="dialog-title")
            yield Input(self.initial_text, placeholder="words to find (all of them, any case, word beginnings)",
                        id="search-text")
            yield Static(id="search-status", classes="hint")
            yield OptionList(id="search-hits")
            yield Static(Content(HINT), classes="hint")

    def on_mount(self) -> None:
        self.run_search(self.initial_text)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.run_search(event.value)

    def run_search(self, text: str) -> None:
        self.last_text = text
        try:
            self.hits = self.store.search_messages(text, limit=NUM_HITS_SHOWN) if text.strip() else []
            problem = None
        except SearchError as e:  # (user text is quoted, so this is unexpected: one line, never a crash)
            self.hits, problem = [], str(e)
        hits = self.query_one("#search-hits", OptionList)
        hits.clear_options()
        options: list[Option | None] = []
        for i, hit in enumerate(self.hits):
            options += [None, Option(hit_prompt(hit), id=str(i))] if i else [Option(hit_prompt(hit), id=str(i))]
        hits.add_options(options)  # (None: a separator line between hits)
        if self.hits:
            hits.highlighted = 0
        self.query_one("#search-status", Static).update(Content(safe_text(self.status_line(text, problem))))

    def status_line(self, text: str, problem: str | None) -> str:
        if problem is not None:
            return problem
        fallback = "" if self.store.search_uses_fts else f" · {NO_FTS5_LINE}"
        if not text.strip():
            return "Type words to find in every chat's messages" + fallback
        if not self.hits:
            return "No message holds all of these words" + fallback
        more = f" (the best {NUM_HITS_SHOWN})" if len(self.hits) == NUM_HITS_SHOWN else ""
        return f"{len(self.hits)} {'message' if len(self.hits) == 1 else 'messages'}{more}" + fallback

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.hits:
            self.dismiss(self.hits[0])

    def on_key(self, event) -> None:
        if event.key == "down" and self.query_one("#search-text", Input).has_focus and self.hits:
            event.stop()
            self.query_one("#search-hits", OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.hits[int(event.option.id)])
