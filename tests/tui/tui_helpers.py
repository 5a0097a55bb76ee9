"""Helpers for UI tests: read the screen as text or as the ANSI a terminal would get; wait for a condition."""
from __future__ import annotations

import io
import os
import re
import time
from pathlib import Path

from rich.console import Console
from textual import events
from textual.app import App
from textual.keys import _character_to_key

SIZE = (150, 45)  # the terminal size of the UI tests: wide enough for the chat list, conversation and panels


def _render(app: App) -> Console:
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console


def screen_text(app: App) -> str:
    """Every cell of the screen, line by line, without styles (what a person reads)."""
    return _render(app).export_text(styles=False)


def screen_ansi(app: App) -> str:
    """The bytes the driver would write for a full repaint: text plus escape sequences for styles."""
    return _render(app).file.getvalue()


async def wait_for(pilot, condition, timeout: float = 20.0, step: float = 0.02) -> None:
    """Let the app run until condition() is true (or fail after timeout seconds, showing the app's state)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            app = pilot.app
            state = {cid: (s.turn and (s.turn.num_output_tokens, s.turn.cancelled),
                           [(m.role, m.status, m.finish_reason, m.error) for m in s.conversation.messages])
                     for cid, s in getattr(app, "sessions", {}).items()}
            bridge = getattr(app, "bridge", None)
            engine = bridge and bridge.service and (bridge._posted, len(bridge._items), bridge.stats(),
                                                    getattr(getattr(bridge.service, '_thread', None), 'is_alive', bool)(), app._message_queue.qsize())
            raise AssertionError(f"timed out after {timeout} s; chats: {state}\nengine: {engine}\n{screen_text(app)}")
        await pilot.pause(step)


async def press(pilot, *keys: str, settle: float = 0.05) -> None:
    """Like pilot.press (the same key events through the driver) without pilot's wait for an idle CPU,
    which waits two full seconds per key while the engine thread is busy generating."""
    app = pilot.app
    for key in keys:
        char = key if len(key) == 1 else None
        if char is not None and not key.isalnum():
            key = _character_to_key(key)  # " " -> "space", as pilot.press does
        app._driver.send_message(events.Key(key, char))
        await pilot.pause(settle)
        await pilot._wait_for_screen()


async def quit_app(pilot) -> None:
    """Ctrl+Q, then wait until the app has stored everything and let go of the data dir."""
    await press(pilot, "ctrl+q")
    await wait_for(pilot, lambda: pilot.app.store._db is None)


SNAPSHOTS = Path(__file__).parent / "snapshots"
_VOLATILE = [  # figures that depend on the machine's speed or the clock, not on what the app does
    (re.compile(r"\d[\d,.]*\s?(ms|s)\b(?!/)"), "‹time›"),  # 412 ms or 1.04 s: the unit follows the speed too
    (re.compile(r"\d[\d,.]*\s?(tok/s|GB/s)\b"), r"‹n› \1"),
    (re.compile(r"\b\d\d:\d\d\b"), "‹hh:mm›"),
    (re.compile(r"[▁▂▃▄▅▆▇█]{2,}"), "‹sparkline›"),
    (re.compile(r"\b[0-9a-f]{16}\b"), "‹model›"),
    (re.compile(r"hit rate \d+%"), "hit rate ‹n›%"),
    (re.compile(r"threads \d+ of \d+ CPUs · (auto|others busy)"), "threads ‹n› of ‹n› CPUs · auto"),  # the load
    (re.compile(r" {2,}"), "  "),  # a shorter or longer figure shifts what follows it
]


def normalized(text: str) -> str:
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def assert_snapshot(app: App, name: str) -> str:
    """Compare the screen (as text, volatile figures masked) with snapshots/NAME.txt; the first run, or a run
    with LLMCHAT_UPDATE_SNAPSHOTS=1, writes it (and NAME.svg beside it, for people). Returns the raw text."""
    raw = screen_text(app)
    text = normalized(raw)
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("LLMCHAT_UPDATE_SNAPSHOTS") or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        app.save_screenshot(f"{name}.svg", str(SNAPSHOTS))
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"the screen differs from {path} (LLMCHAT_UPDATE_SNAPSHOTS=1 rewrites it):\n{text}"
    return raw


async def one_turn(pilot, text: str, settings, repaint: float = 0.0) -> None:
    """Send text in the current chat with these settings and wait until the reply has finished."""
    app = pilot.app
    await wait_for(pilot, lambda: app.bridge.ready)  # (while the model loads, Enter keeps the text in the box)
    chat = app.current
    app.store.update_settings(chat.chat_id, settings)
    chat.conversation.settings = settings
    app.chat_screen.prompt.load_text(text)
    await press(pilot, "enter")
    await wait_for(pilot, lambda: chat.conversation.messages and not chat.busy)
    if repaint:
        await pilot.pause(repaint)  # let the screen repaint


def capture(app: App, name: str) -> None:
    """With LLMCHAT_CAPTURE_DIR set, save the screen as NAME.txt and NAME.svg there (for notes and reviews)."""
    folder = os.environ.get("LLMCHAT_CAPTURE_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.txt").write_text(screen_text(app), encoding="utf-8")
        app.save_screenshot(f"{name}.svg", folder)
