"""A reply's <think> block in the transcript: streamed into an open collapsible block, collapsed with a token
count once the reply ends, toggled by Alt+R (the last block) or r (the focused reply); a reply whose prompt
opened <think> (Started.reasoning_open) streams into the block from its first word."""
from __future__ import annotations

from textual.widgets import Markdown
from tui_helpers import SIZE, capture, one_turn, press, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.tui.app import LlmChatApp
from llmchat.tui.widgets.reasoning_block import ReasoningBlock
from llmchat.tui.widgets.transcript import AssistantMessage

from fake_backend import FakeBackend

REPLY = "<think>The user greets me. A short [bold]friendly[/bold] answer fits.</think> Hello! How can I help?"
SETTINGS = ChatSettings(None, 0.0, 1.0, 100)


def blocks(app) -> list[ReasoningBlock]:
    return [b for b in app.chat_screen.transcript.query(ReasoningBlock) if b.display]


async def test_reasoning_streams_open_then_collapses_and_toggles(tmp_path):
    app = LlmChatApp(tmp_path / "data", lambda progress, sink: FakeBackend(sink, reply=REPLY, delay_s=0.05))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chat = app.current
        app.chat_screen.prompt.load_text("Hi")
        await press(pilot, "enter")
        await wait_for(pilot, lambda: blocks(app) and "greets" in blocks(app)[0].text, timeout=10)
        block = blocks(app)[0]
        assert chat.busy and not block.collapsed  # shown while it streams
        assert block.title.startswith("Thinking…")
        capture(app, "reasoning_streaming")
        await wait_for(pilot, lambda: not chat.busy)
        await pilot.pause(0.1)
        reply = chat.conversation.messages[-1]
        assert reply.content == REPLY  # the raw text (tags included) is what the chat keeps
        assert block.collapsed and block.title == "Thought for 9 tokens"  # the 9 words of the block, tags included
        answer = app.chat_screen.transcript.reply_view(reply).query_one(Markdown)
        assert answer.source.strip() == "Hello! How can I help?"
        text = screen_text(app)
        capture(app, "reasoning_collapsed")
        assert "▶ Thought for 9 tokens" in text and "greets" not in text and "Reasoning" in text  # (footer)

        await press(pilot, "alt+r")
        await wait_for(pilot, lambda: not block.collapsed)
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "▼ Thought for 9 tokens" in text
        assert "[bold]friendly[/bold]" in text  # model text, never markup
        capture(app, "reasoning_block")
        app.save_screenshot("reasoning_block.svg", str(tmp_path))

        view = app.chat_screen.transcript.reply_view(reply)
        view.focus()
        await press(pilot, "r")
        await wait_for(pilot, lambda: block.collapsed)


async def test_a_reply_begun_inside_reasoning_and_a_reopened_chat(tmp_path):
    reply_text = "Thinking already. Still thinking.</think> The answer is 4."
    app = LlmChatApp(tmp_path / "data",
                     lambda progress, sink: FakeBackend(sink, reply=reply_text, reasoning_open=True))
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "2+2?", SETTINGS, repaint=0.1)
        block = blocks(app)[0]
        assert block.text.strip() == "Thinking already. Still thinking." and block.collapsed
        assert block.title == "Thought for 4 tokens"
        reply = app.current.conversation.messages[-1]
        assert app.chat_screen.transcript.reply_view(reply).query_one(Markdown).source.strip() == "The answer is 4."

    again = LlmChatApp(tmp_path / "data", lambda progress, sink: FakeBackend(sink))
    async with again.run_test(size=SIZE) as pilot:  # from the store: no token count, the split inferred
        await wait_for(pilot, lambda: again.bridge.ready and blocks(again))
        await pilot.pause(0.1)
        (block,) = blocks(again)
        assert block.collapsed and block.title == "Reasoning · 33 characters"
        assert "The answer is 4." in screen_text(again) and "Still thinking" not in screen_text(again)


async def test_alt_r_without_reasoning_says_so(tmp_path):
    app = LlmChatApp(tmp_path / "data", lambda progress, sink: FakeBackend(sink))
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "Hi", SETTINGS, repaint=0.1)
        assert not blocks(app)
        await press(pilot, "alt+r")
        await wait_for(pilot, lambda: any("has a reasoning block" in n.message for n in app._notifications))
