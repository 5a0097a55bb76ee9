"""The block map: every block of the paged KV cache as one cell, refreshed once a second while open.

A cell is the letter of the chat that holds it (its cached prefix or its reply in flight), `+` when
several chats hold it (shared: highlighted), `#`/`o` for a used/cached block no listed chat holds, `·` for
a free one. Used blocks are green, cached-free blue, free dim; underlined cells are the next eight the LRU
evicts. Below, per chat: blocks, shared, in use, and its place in the eviction order. The snapshot comes
from the engine thread (core/inspect/block_map.py) with the EngineStats of the same moment; this only formats it.
"""
from __future__ import annotations

import string

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from ...core.inspect.block_map import BlockCell, BlockMap
from ...core.text.sanitize import safe_text

BLOCK_MAP_INTERVAL_S = 1.0  # the engine builds a snapshot once a second while the map is open
CELLS_PER_ROW = 64
NEXT_EVICTED = 8  # underlined: the blocks the LRU evicts next
LETTERS = string.ascii_uppercase
STYLES = {"used": "$success", "cached": "$primary", "free": "$text-muted"}


def chat_letters(block_map: BlockMap) -> dict:
    return {c.tag: LETTERS[i % len(LETTERS)] for i, c in enumerate(block_map.chats)}


def cell_content(cell: BlockCell, letters: dict) -> tuple[str, str]:
    shared = len(cell.holders) > 1 or cell.ref_count > 1
    if cell.state == "free":
        glyph = "·"
    elif shared:
        glyph = "+"
    elif cell.holders:
        glyph = letters.get(cell.holders[0], "?")
    else:
        glyph = "#" if cell.state == "used" else "o"
    style = STYLES[cell.state] + (" bold reverse" if shared and cell.state != "free" else "")
    if cell.lru_rank is not None and cell.lru_rank < NEXT_EVICTED:
        style += " underline"
    if cell.pinned:
        style += " italic"
    return glyph, style


def grid(block_map: BlockMap) -> Content:
    letters = chat_letters(block_map)
    parts: list = []
    for i, cell in enumerate(block_map.cells):
        if i and i % CELLS_PER_ROW == 0:
            parts.append("\n")
        parts.append(cell_content(cell, letters))
    return Content.assemble(*parts)


def summary(block_map: BlockMap) -> str:
    s = block_map.stats
    return (f"{len(block_map.cells):,} blocks × {block_map.block_size} tokens · used {block_map.count('used'):,} · "
            f"cached {block_map.count('cached'):,} · free {block_map.count('free'):,} · shared "
            f"{block_map.num_shared:,}\nengine stats at the same moment: used {s.num_blocks_used:,} · cached "
            f"{s.num_blocks_cached_free:,} · free {s.num_blocks_free:,} · running {s.num_running} · waiting "
            f"{s.num_waiting}")


def chats_text(block_map: BlockMap, titles: dict) -> str:
    if not block_map.chats:
        return "no chat holds a block yet"
    letters = chat_letters(block_map)
    lines = ["chat                          blocks  shared  in use  disk only  evicted next"]
    for c in block_map.chats:
        title = safe_text(titles.get(c.tag, "(deleted chat)"))
        title = title if len(title) <= 20 else title[:19] + "…"
        rank = "—" if c.next_eviction_rank is None else f"LRU #{c.next_eviction_rank + 1:,}"
        lines.append(f"{letters[c.tag]} #{c.tag!s:<4} {title:<20} {c.num_blocks:>6,}  {c.num_shared:>6,}  "
                     f"{c.num_in_use:>6,}  {c.num_disk_only:>9,}  {rank}")
    first = block_map.chats[0]
    if first.next_eviction_rank is not None:
        lines.append(f"\nChat #{first.tag} loses its prefix first (its block is LRU #{first.next_eviction_rank + 1}).")
    return "\n".join(lines)


LEGEND = ("A–Z: the chat holding the block · +: shared by several (refcount or chats) · #: used, no chat "
          "listed · o: cached, no chat listed · ·: free\ngreen: used · blue: cached-free (LRU-evictable) · "
          "underlined: the next eight the LRU evicts · italic: pinned (F7; evicted last) · disk only: prefix blocks evicted from memory but kept on disk · "
          "refreshed once a second · Esc closes")


class BlockMapScreen(Screen):
    BINDINGS = [Binding("escape,q,f8", "app.pop_screen", "Close")]

    def __init__(self) -> None:
        super().__init__(id="block-map-screen")
        self.block_map: BlockMap | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Content("KV block map"), classes="dialog-title")
            yield Static(Content("asking the engine…"), id="block-summary")
            yield Static(id="block-grid")
            yield Static(id="block-chats")
            yield Static(Content(LEGEND), classes="hint")
        yield Footer()

    async def on_mount(self) -> None:
        await self.refresh_map()
        self.set_interval(BLOCK_MAP_INTERVAL_S, self.refresh_map)

    async def refresh_map(self) -> None:
        block_map = await self.app.bridge.ask(lambda backend: backend.block_map())
        if block_map is None or not self.is_attached:
            return
        self.block_map = block_map
        titles = {s.chat_id: s.conversation.title for s in self.app.sessions.values()}
        self.query_one("#block-summary", Static).update(Content(summary(block_map)))
        self.query_one("#block-grid", Static).update(grid(block_map))
        self.query_one("#block-chats", Static).update(Content(chats_text(block_map, titles)))
