"""A message the chat's context cannot hold opens a priced choice (issue 27 item 5, tui/actions/full_chat.py):
drop the oldest turns into a new chat, or fork from an earlier message; the full chat is never changed."""
from __future__ import annotations

from tui_helpers import SIZE, capture, one_turn, press, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings, Conversation, Message
from llmchat.tui.screens.full_chat_choice import FullChatChoiceScreen
from llmchat.tui.text.full_chat import full_chat_choices

SETTINGS = ChatSettings(None, 0.0, 1.0, 4)


def chat_of(spans: list[tuple[int, int]]) -> Conversation:
    chat = Conversation(1, settings=ChatSettings(None, 0.0, 1.0, 10))
    for i, span in enumerate(spans):
        chat.messages.append(Message("user" if i % 2 == 0 else "assistant", f"m{i}", token_span=span))
    chat.token_ids = list(range(spans[-1][1]))
    return chat


def test_each_choice_is_priced_in_prefill_tokens_and_seconds():
    chat = chat_of([(20, 300), (300, 320), (320, 600), (600, 620), (620, 900), (900, 920)])
    trim, fork = full_chat_choices(chat, message_tokens=200, context=1000, prefill_rate=500.0)
    # room for the chat: 1000 - 200 - 10 = 790; dropping the first turn keeps 600 tokens + 20 of system prompt
    assert (trim.kind, trim.keep_from, trim.num_prefill_tokens) == ("trim", 2, 600 + 200)
    assert "Drop the oldest 1 turns" in trim.text and "prefill 800 tokens · ~1.6 s" in trim.text
    # the latest reply whose end fits the room: #4 (ends at 620); only the new message is prefilled
    assert (fork.kind, fork.keep_from, fork.num_prefill_tokens) == ("fork", 3, 200) and "~0.4 s" in fork.text
    assert full_chat_choices(chat, message_tokens=995, context=1000, prefill_rate=0) == []  # nothing can fit


async def test_a_message_past_the_context_offers_the_choice_and_trim_keeps_the_chat(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "cache " * 450, SETTINGS)
        await one_turn(pilot, "block " * 450, SETTINGS)
        full = app.current
        before = [(m.role, m.content) for m in full.conversation.messages]
        app.chat_screen.prompt.load_text("token " * 200)
        await press(pilot, "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FullChatChoiceScreen)
                       and "Drop the oldest 1 turns" in screen_text(app), timeout=30)
        assert "tokens · ~" in screen_text(app) and "Fork after message #2" in screen_text(app)
        capture(app, "full-chat-choice")
        await pilot.click("#choice-trim")
        await wait_for(pilot, lambda: app.current is not full, timeout=30)
        trimmed = app.current
        assert "turns dropped" in trimmed.conversation.title
        assert [m.content for m in trimmed.conversation.messages] == [c for _, c in before[2:]]
        assert app.chat_screen.prompt.message_text() == "token " * 200  # waits there for Enter
        assert [(m.role, m.content) for m in full.conversation.messages] == before  # the full chat is unchanged
        await press(pilot, "enter")
        await wait_for(pilot, lambda: len(trimmed.conversation.messages) == 4 and not trimmed.busy, timeout=60)
        assert trimmed.conversation.messages[-1].status == "done"
