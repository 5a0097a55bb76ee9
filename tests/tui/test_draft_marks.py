"""F6 ("Mark accepted drafts"): replies as plain text with the characters of kept speculative drafts
underlined, streaming and finished; F6 again gives the Markdown view back."""
from __future__ import annotations

from textual.widgets import Markdown, Static
from tui_helpers import SIZE, one_turn, press, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.tui.app import LlmChatApp
from llmchat.tui.text.draft_marks import DRAFT_STYLE, marked_reply
from llmchat.tui.widgets.transcript import AssistantMessage

from fake_backend import FakeBackend

REPLY = "The cat sat on the mat and the cat sat on the mat."


def underlined(content) -> list[str]:
    """The text of every span styled as a kept draft."""
    return [content.plain[s.start : s.end] for s in content.spans if str(s.style) == DRAFT_STYLE]


def test_marked_reply_styles_exactly_the_spans_and_keeps_offsets_through_sanitising():
    text = "ab\x1b[2Jcd efgh"
    content = marked_reply(text, [(0, 2), (8, 10)])
    assert underlined(content) == ["ab", " e"]
    assert "\x1b" not in content.plain and content.plain.endswith("fgh")
    assert underlined(marked_reply("short", [(3, 99)])) == ["rt"]  # a span past the end is clipped
    assert underlined(marked_reply("plain", [])) == []
    long = marked_reply("x" * 25_000, [(19_990, 20_010)])  # cut where the Markdown view cuts
    assert underlined(long) == ["x" * 10] and long.plain.endswith("\n… (5,000 more characters not shown)")


async def test_f6_underlines_the_words_the_backend_marked_as_kept_drafts(tmp_path):
    drafted = frozenset({2, 3, 4, 8, 9})  # "sat on the", "cat sat"
    app = LlmChatApp(tmp_path / "data", lambda progress, sink: FakeBackend(sink, reply=REPLY, drafted_words=drafted))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "Say it twice", ChatSettings(None, 0.0, 1.0, 50))
        reply = app.current.conversation.messages[-1]
        assert reply.draft_spans == [(7, 18), (30, 38)]
        assert [reply.content[a:b] for a, b in reply.draft_spans] == [" sat on the", " cat sat"]

        await press(pilot, "f6")
        await wait_for(pilot, lambda: app.chat_screen.transcript.reply_view(reply).query(".-drafts"))
        body = app.chat_screen.transcript.reply_view(reply).query_one(".-drafts", Static)
        assert underlined(body.visual) == [" sat on the", " cat sat"]
        await pilot.pause(0.1)
        assert "underlined: drafted and kept, 38% of the text" in screen_text(app)  # 19 of 50 characters

        await one_turn(pilot, "Again", ChatSettings(None, 0.0, 1.0, 50))  # streams into the marked view
        second = app.current.conversation.messages[-1]
        await wait_for(pilot, lambda: app.chat_screen.transcript.reply_view(second).query(".-drafts"))
        body = app.chat_screen.transcript.reply_view(second).query_one(".-drafts", Static)
        assert underlined(body.visual) == [" sat on the", " cat sat"]

        await press(pilot, "f6")
        await wait_for(pilot, lambda: app.chat_screen.transcript.reply_view(second).query(Markdown))
        assert not app.chat_screen.transcript.query(".-drafts")
        assert all(isinstance(v, AssistantMessage) for v in app.chat_screen.transcript.query(AssistantMessage))


async def test_the_mark_drafts_key_moves_with_the_config_file_in_the_input_box_too(tmp_path, monkeypatch):
    from llmchat.core.user_config import load_or_default

    path = tmp_path / "config.toml"
    path.write_text('[keys]\ntoggle_drafts = "f12"\n')
    monkeypatch.setenv("LLMCHAT_CONFIG", str(path))
    app = LlmChatApp(tmp_path / "data", lambda progress, sink: FakeBackend(sink), user_config=load_or_default()[0])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        app.chat_screen.prompt.focus()
        await press(pilot, "f6")  # the old key: the input box's select-line again
        assert not app.mark_drafts
        await press(pilot, "f12")
        assert app.mark_drafts
