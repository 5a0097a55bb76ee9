"""Markup and terminal control sequences in a reply, a stored chat or a paste reach the screen as
harmless literal characters, never as markup or as codes the terminal would obey."""
from __future__ import annotations

import re

from textual import events
from tui_helpers import SIZE, press, screen_ansi, screen_text, wait_for

from llmchat.core.api.events import TextDelta
from llmchat.core.chats.store import ChatSettings, ChatStore
from llmchat.core.text.sanitize import safe_text

PAYLOAD = (
    "[bold]B[/bold] [link=https://evil.example]click[/link] "
    "CSI:\x1b[2J\x1b[31mred\x1b[0m OSC8:\x1b]8;;https://evil.example\x1b\\x\x1b]8;;\x1b\\ "
    "OSC52:\x1b]52;c;aGVsbG8=\x07 DCS:\x1bP1$qm\x1b\\ ESC:a\x1bb C1:\x9b2J\x9d52;c;x\x9c BS:\x08 CR:x\ry"
)
# what must be visible, literally, wherever PAYLOAD is shown
VISIBLE = ["[bold]B[/bold]", "[link=https://evil.example]click[/link]", "␛[2J␛[31mred␛[0m", "␛]52;c;aGVsbG8=␇",
           "␛P1$qm", "a␛b", "\\x9b2J\\x9d52;c;x\\x9c", "␈", "x␍y"]
OURS = re.compile(r"\x1b\[[0-9;:]*[mH]")  # the styles (SGR) and cursor moves (CUP) Textual itself sends


def assert_terminal_safe(app) -> None:
    """The bytes a repaint sends: nothing but text, styles and cursor moves."""
    rest = OURS.sub("", screen_ansi(app))
    bad = sorted({f"U+{ord(ch):04X}" for ch in rest if (ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) < 0xA0})
    assert not bad, f"control codes would reach the terminal: {bad}"


def assert_visible(text: str) -> None:
    flat = re.sub(r"\s*\n\s*[▕▏│ ▌]*", "", text)  # join wrapped lines
    for piece in VISIBLE:
        assert piece in text or piece in flat, piece


async def test_a_stored_reply_and_title_with_markup_and_escapes_show_as_text(make_app, tmp_path):
    with ChatStore(tmp_path / "data") as store:
        chat = store.create_chat()
        user, reply = chat.start_turn("title " + PAYLOAD[:40])
        chat.finish_reply(reply, PAYLOAD, "done", "stop")
        store.add_messages(chat, user, reply)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        text = screen_text(app)
        assert_visible(text)
        assert "title [bold]B[/bold]" in text  # the chat list and header: literal too
        assert_terminal_safe(app)


async def test_a_streamed_reply_with_escapes_shows_as_text(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chat = app.current
        app.store.update_settings(chat.chat_id, ChatSettings(None, 0.0, 1.0, 900))
        chat.conversation.settings = ChatSettings(None, 0.0, 1.0, 900)
        app.chat_screen.prompt.load_text("hi")
        await press(pilot, "enter")
        await wait_for(pilot, lambda: chat.turn is not None and chat.turn.num_output_tokens > 0)
        handle = chat.turn.handle
        # what the engine thread does for a model that wrote PAYLOAD: hand a TextDelta to the bridge's sink
        app.bridge._sink(handle, TextDelta(handle.handle_id, "\n\n" + PAYLOAD + "\n\n", ()))
        await wait_for(pilot, lambda: "[link=https://evil.example]" in screen_text(app))
        assert_visible(screen_text(app))
        assert_terminal_safe(app)
        await press(pilot, "escape")
        await wait_for(pilot, lambda: not chat.busy)


async def test_a_pasted_message_with_escapes_is_shown_and_sent_as_text(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chat = app.current
        prompt = app.chat_screen.prompt
        prompt.focus()
        prompt.post_message(events.Paste(PAYLOAD))
        await pilot.pause(0.2)
        assert prompt.text == safe_text(PAYLOAD)  # what is in the box is what is shown: no hidden codes
        assert_visible(screen_text(app))
        assert_terminal_safe(app)
        await press(pilot, "enter")
        await wait_for(pilot, lambda: chat.conversation.messages and chat.conversation.messages[0].role == "user")
        assert chat.conversation.messages[0].content == safe_text(PAYLOAD)
        await pilot.pause(0.2)
        assert_visible(screen_text(app))
        assert_terminal_safe(app)
        await press(pilot, "escape")
        await wait_for(pilot, lambda: not chat.busy)
