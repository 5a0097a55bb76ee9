"""Search across chats (Ctrl+F) opens another chat at the message found; a reply's code blocks copy
exactly (a click on a block's "copy" line, or c on a focused block). Driven by the fake backend."""
from __future__ import annotations

import pytest
from textual.widgets import Input

from llmchat.core.chats import search as chat_search
from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.chats.store import ChatStore
from llmchat.tui.app import LlmChatApp
from llmchat.tui.screens.search import SearchScreen
from llmchat.tui.widgets.code_fence import CopyableFence, CopyLink
from llmchat.tui.widgets.transcript import MessageView

from fake_backend import FakeBackend
from tui_helpers import SIZE, one_turn, press, quit_app, screen_text, wait_for


def fake_app(data_dir, reply: str = "Hello from the fake backend.") -> LlmChatApp:
    return LlmChatApp(data_dir, lambda progress, sink: FakeBackend(sink, reply=reply, delay_s=0.001))


def two_chats(data_dir) -> tuple[int, int]:
    """A long chat with one message about volcanoes in its middle, and a newer chat the app opens first.
    Returns (the long chat's id, that message's id)."""
    with ChatStore(data_dir) as store:
        long = store.create_chat()
        for i in range(20):
            user, reply = long.start_turn(f"Question {i} about geology")  # (each step stores itself)
            long.finish_reply(reply, "Volcanoes form where magma reaches the surface; Etna erupts often." if i == 5
                              else f"Answer {i}: rocks are old.\n\nMore about rocks, line two.", "done", "stop")
        target = long.messages[11].message_id
        newer = store.create_chat()
        user, reply = newer.start_turn("How do I boil an egg?")
        newer.finish_reply(reply, "Seven minutes in simmering water.", "done", "stop")
    return long.chat_id, target


@pytest.mark.parametrize("fts5", [True, False], ids=["fts5", "like-scan"])
async def test_search_finds_a_message_in_another_chat_and_opens_it_there(tmp_path, monkeypatch, fts5):
    if not fts5:
        monkeypatch.setattr(chat_search, "fts5_available", lambda db: False)
    long_id, target = two_chats(tmp_path / "data")
    app = fake_app(tmp_path / "data")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current_id is not None)
        assert app.current_id != long_id  # the newer chat is open
        await press(pilot, "ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        search = app.screen
        await press(pilot, '"')  # a lone quote is FTS5 syntax: searched as text, no error
        await wait_for(pilot, lambda: "No message holds all of these words" in screen_text(app))
        await press(pilot, "backspace", *"etna Volcano")  # every word, any order, any case
        await wait_for(pilot, lambda: len(search.hits) == 1)
        text = screen_text(app)
        assert "Question 0 about geology · assistant" in text  # the chat's title and the message's role
        assert "Etna erupts" in text and "1 message" in text
        assert (chat_search.NO_FTS5_LINE in text) is (not fts5)

        await press(pilot, "enter")  # opens the first hit
        await wait_for(pilot, lambda: app.screen is app.chat_screen and app.current_id == long_id)
        transcript = app.chat_screen.transcript
        await wait_for(pilot, lambda: isinstance(app.focused, MessageView) and transcript.scroll_y > 0)
        view = app.focused
        assert view.message.message_id == target and "Etna" in view.message.content
        await wait_for(pilot, lambda: (transcript.region.contains_region(view.region)
                                       or view.region.y == transcript.region.y) and "Etna erupts often" in screen_text(app))
        assert "Question 19" not in screen_text(app)  # not the bottom of the chat: scrolled to the message

        await press(pilot, "ctrl+f")  # the last search comes back; ↓ and Enter pick from the list
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        search = app.screen
        assert search.query_one(Input).value == "etna Volcano"
        await press(pilot, "down")
        await press(pilot, "ctrl+f")  # (on the list: not a second search screen)
        assert app.screen is search and len(app.screen_stack) == 3
        await press(pilot, "enter")
        await wait_for(pilot, lambda: app.screen is app.chat_screen and isinstance(app.focused, MessageView)
                       and app.focused.message.message_id == target)
        await quit_app(pilot)


CODE_REPLY = ("Two ways:\n\n```python\ndef greet(name):\n\treturn f\"hi {name}\"\n```\n\nor in a shell:\n\n"
              "~~~sh\necho \x1b[31mred\x1b[0m ```not a fence```\n~~~\nDone.")


async def test_a_code_block_copies_its_exact_text(tmp_path):
    app = fake_app(tmp_path / "data", reply=CODE_REPLY)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "show me code", ChatSettings(None, 0.0, 1.0, 200), repaint=0.2)
        chat = app.current
        assert chat.conversation.messages[-1].content == CODE_REPLY
        await wait_for(pilot, lambda: len(app.chat_screen.transcript.query(CopyableFence)) == 2)
        first, second = app.chat_screen.transcript.query(CopyableFence)
        text = screen_text(app)
        assert "python · ⧉ copy (c)" in text and "sh · ⧉ copy (c)" in text
        assert "␛[31mred" in text  # shown as a visible symbol

        await pilot.click(second.query_one(CopyLink))
        await wait_for(pilot, lambda: app.clipboard == "echo [31mred[0m ```not a fence```")  # exact, ESC bytes removed

        first.focus()
        await wait_for(pilot, lambda: app.focused is first)
        await press(pilot, "c")
        await wait_for(pilot, lambda: app.clipboard == 'def greet(name):\n\treturn f"hi {name}"')
        assert any(n.message.startswith("Copied code block 1 (2 lines") for n in app._notifications)

        reply_view = first.query_ancestor(MessageView)
        reply_view.focus()
        await wait_for(pilot, lambda: app.focused is reply_view)
        await press(pilot, "c")  # c on the reply itself still copies all of it
        await wait_for(pilot, lambda: app.clipboard == CODE_REPLY)
        await quit_app(pilot)


async def test_a_code_block_still_streaming_copies_what_has_arrived(tmp_path):
    words = [f"w{i}" for i in range(60)]
    reply = "Here:\n```text\n" + " ".join(words) + "\n```\nend"
    app = LlmChatApp(tmp_path / "data", lambda progress, sink: FakeBackend(sink, reply=reply, delay_s=0.1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chat = app.current
        app.chat_screen.prompt.load_text("stream code")
        await press(pilot, "enter")
        await wait_for(pilot, lambda: chat.busy and app.chat_screen.transcript.query(CopyableFence))
        await wait_for(pilot, lambda: "w3" in app.chat_screen.transcript.query_one(CopyableFence).code)
        fence = app.chat_screen.transcript.query_one(CopyableFence)
        fence.focus()
        await press(pilot, "c")
        assert chat.busy, "the reply was still streaming"
        copied = app.clipboard
        assert copied.startswith("w0 w1 w2 w3") and " ".join(words).startswith(copied)  # the unclosed fence so far
        assert copied != " ".join(words)
        await quit_app(pilot)
