"""What users of chat clients expect: export, command palette, themes, copy, loading progress, clear
banners for a refused or full chat, a huge paste, and one app per data dir."""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import threading
import time

import pytest

from textual import events
from textual.command import CommandPalette
from tui_helpers import SIZE, one_turn, press, quit_app, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.chats.store import ChatStore, DataDirInUse
from llmchat.tui.actions.registry import ACTIONS
from llmchat.tui.app import LlmChatApp
from llmchat.tui.run import run_app
from llmchat.tui.commands.export import chat_dict, run_export
from llmchat.core.text.sanitize import is_safe


async def test_export_copy_and_theme(make_app, tmp_path):
    data = tmp_path / "data"
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "Export me\x1b[2J", ChatSettings(None, 0.0, 1.0, 20), repaint=0.2)
        chat = app.current
        reply = chat.conversation.messages[-1]

        await press(pilot, "ctrl+l")  # copy the last reply
        assert app.clipboard == reply.content

        await press(pilot, "ctrl+s")  # export: Markdown and JSON under the data dir
        md, js = data / "exports" / f"chat-{chat.chat_id}.md", data / "exports" / f"chat-{chat.chat_id}.json"
        markdown = md.read_text()
        assert "## User" in markdown and "Export me␛[2J" in markdown and is_safe(markdown)
        assert "TTFT" in markdown and "20 tokens" in markdown
        exported = json.loads(js.read_text())
        assert exported["messages"][0]["content"] == "Export me\x1b[2J"  # exact text, escaped in the file
        assert "\x1b" not in js.read_text()

        # `llmchat export` reads the store while the app holds it
        with contextlib.redirect_stdout(io.StringIO()) as listing_out:
            assert run_export(argparse.Namespace(data_dir=str(data), chat_id=None)) == 0
        listing = listing_out.getvalue()
        assert f"{chat.chat_id:>5}" in listing and "Export me␛[2J" in listing
        out = tmp_path / "chat.json"
        args = argparse.Namespace(data_dir=str(data), chat_id=chat.chat_id, format="json", output=str(out))
        assert run_export(args) == 0
        with ChatStore(data, readonly=True) as store:
            assert json.loads(out.read_text()) == json.loads(json.dumps(chat_dict(store.load_chat(chat.chat_id))))
            assert json.loads(out.read_text())["token_ids"] == store.load_chat(chat.chat_id).token_ids
        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert run_export(argparse.Namespace(data_dir=str(data), chat_id=999, format="markdown", output=None)) == 2
        assert "no chat with id 999" in err.getvalue()
        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert run_export(argparse.Namespace(data_dir=str(tmp_path / "empty"), chat_id=None)) == 2
        assert "no chats in" in err.getvalue() and "--data-dir" in err.getvalue()

        assert app.theme == "textual-dark"
        await press(pilot, "ctrl+t")
        assert app.theme == "textual-light"
        await quit_app(pilot)
    app2 = make_app()
    async with app2.run_test(size=SIZE):
        assert app2.theme == "textual-light"  # remembered


async def test_command_palette_has_every_action_and_runs_them(make_app):
    app = make_app()
    for a in ACTIONS:
        assert hasattr(app, "action_" + a.action.split("(")[0]), a.action
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "first", ChatSettings(None, 0.0, 1.0, 5), repaint=0.2)
        first = app.current
        await press(pilot, "ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await press(pilot, *"New chat")
        await pilot.pause(0.3)
        await press(pilot, "enter")
        await wait_for(pilot, lambda: app.current is not first and "Type a message" in screen_text(app))
        assert len(app.sessions) == 2
        await press(pilot, "ctrl+p", *"Open chat #1")
        await pilot.pause(0.3)
        await press(pilot, "enter")
        await wait_for(pilot, lambda: app.current is first and "first" in screen_text(app))


async def test_a_huge_paste_stays_responsive_and_a_too_long_message_is_refused_with_a_banner(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chat = app.current
        prompt = app.chat_screen.prompt
        prompt.focus()
        paste = ("lorem ipsum dolor sit amet " * 40 + "\n") * 960  # ~1 MB
        start = time.monotonic()
        prompt.post_message(events.Paste(paste))
        await wait_for(pilot, lambda: "[paste #1:" in prompt.text)
        assert time.monotonic() - start < 1.0  # the text area holds a placeholder, not 1 MB to lay out
        assert prompt.message_text() == paste
        await press(pilot, "enter")
        await wait_for(pilot, lambda: chat.banner is not None, timeout=60)
        assert chat.banner.kind == "error" and "context is 1024" in chat.banner.text
        await wait_for(pilot, lambda: "Not sent" in screen_text(app))
        banner = str(app.chat_screen.query_one("#banner").render())
        assert "Not sent: the prompt has" in banner and "Your message is back in the input box" in banner
        assert "lorem" not in app.current.conversation.title  # a refused message does not title the chat
        assert prompt.message_text() == paste and chat.conversation.messages == []
        with ChatStore(app.store.data_dir, readonly=True) as store:
            assert store.load_chat(chat.chat_id).messages == []  # nothing half-stored


async def test_a_chat_that_fills_the_context_gets_a_banner_then_refuses_politely(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "word " * 900, ChatSettings(None, 0.0, 1.0, 2000), repaint=0.2)
        chat = app.current
        reply = chat.conversation.messages[-1]
        assert reply.finish_reason == "length" and len(chat.conversation.token_ids) == 1024
        assert chat.banner.kind == "warning" and "reached the model's context of 1,024 tokens" in chat.banner.text
        assert "This chat is full" in screen_text(app)
        app.chat_screen.prompt.load_text("and now?")
        await press(pilot, "enter")
        await wait_for(pilot, lambda: app.chat_screen.prompt.text == "and now?")  # the message is back
        assert chat.banner.kind == "error" and "Not sent" in chat.banner.text and len(chat.conversation.messages) == 2


async def test_loading_progress_is_shown_and_a_failed_load_says_why(tmp_path, engine_factory):
    release = threading.Event()

    def slow_factory(progress, sink):
        progress("fetching the model (42 MB of 98 MB)")
        release.wait(30)
        return engine_factory(progress, sink)

    app = LlmChatApp(tmp_path / "a", slow_factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "fetching the model (42 MB of 98 MB)" in screen_text(app))
        assert app.chat_screen.query_one("#loading").display
        app.chat_screen.prompt.load_text("too early")
        await press(pilot, "enter")
        assert app.current.conversation.messages == [] and app.chat_screen.prompt.text == "too early"
        release.set()
        await wait_for(pilot, lambda: app.bridge.ready and not app.chat_screen.query_one("#loading").display)

    def broken_factory(progress, sink):
        from llmchat.core.weights.resolve import ModelLoadError

        raise ModelLoadError("model not found: /nowhere.gguf (pass a .gguf file or a Hugging Face model folder)")

    app = LlmChatApp(tmp_path / "a", broken_factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "could not start" in screen_text(app))
        assert "model not found: /nowhere.gguf" in screen_text(app).replace("\n", " ") or \
            "model not found" in screen_text(app)


def test_a_second_app_on_the_same_data_dir_is_told_clearly(tmp_path, engine_factory, capsys):
    first = LlmChatApp(tmp_path / "d", engine_factory)
    with pytest.raises(DataDirInUse, match="in use by another llmchat"):
        LlmChatApp(tmp_path / "d", engine_factory)
    args = argparse.Namespace(data_dir=str(tmp_path / "d"), model=None, device=None, kv_cache_gb=None,
                              no_prefix_cache=False)
    assert run_app(args) == 2
    assert "is in use by another llmchat" in capsys.readouterr().err
    first.store.close()


async def test_the_engine_panel_shows_the_compute_team(tmp_path, chatty_model):
    from llmchat.core.config import EngineConfig
    from llmchat.core.cpu_threads import plan_threads
    from llmchat.core.engine.engine import LLMEngine
    from llmchat.core.backends.service import EngineService

    def factory(progress, sink):
        return EngineService(LLMEngine(chatty_model, EngineConfig(max_num_seqs=2, kv_cache_bytes=1 << 20,
                                                                  num_threads=1)), sink)

    app = LlmChatApp(tmp_path / "data", factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await wait_for(pilot, lambda: f"threads 1 of {plan_threads().num_cpus} CPUs · fixed" in screen_text(app))
        await quit_app(pilot)
