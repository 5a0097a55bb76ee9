"""The UI's turn is messages: TurnManager turns backend events into TurnStarted / TurnFinished /
TurnRefused, and the app reacts to those. Driven by a fake backend (no engine, no tokenizer)."""
from __future__ import annotations

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.chats.store import ChatStore
from llmchat.tui.app import LlmChatApp
from llmchat.tui.messages import EngineEventsPending, EngineReady, TurnFinished, TurnStarted

from fake_backend import FakeBackend
from tui_helpers import SIZE, press, quit_app, screen_text, wait_for


def fake_app(tmp_path, **kwargs):
    backends: list[FakeBackend] = []

    def factory(progress, sink):
        backends.append(FakeBackend(sink, **kwargs))
        return backends[-1]

    return LlmChatApp(tmp_path / "data", factory), backends


async def test_a_turn_is_a_sequence_of_messages_and_the_ui_keeps_what_the_backend_said(tmp_path):
    app, backends = fake_app(tmp_path, reply="Paris is the capital of France.")
    seen: list[str] = []
    watched = (EngineReady, TurnStarted, EngineEventsPending, TurnFinished)

    def hook(message) -> None:
        if isinstance(message, watched) and (not seen or seen[-1] != type(message).__name__):
            seen.append(type(message).__name__)

    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chat = app.current
        app.store.update_settings(chat.chat_id, ChatSettings("Be brief.", 0.0, 1.0, 50))
        chat.conversation.settings = ChatSettings("Be brief.", 0.0, 1.0, 50)
        for text in ("What is the capital of France?", "Again"):
            app.chat_screen.prompt.load_text(text)
            await press(pilot, "enter")
            await wait_for(pilot, lambda: len(chat.conversation.messages) in (2, 4) and not chat.busy)
        assert seen == ["EngineReady", "TurnStarted", "EngineEventsPending", "TurnFinished",
                        "TurnStarted", "EngineEventsPending", "TurnFinished"]
        await wait_for(pilot, lambda: "Paris is the capital of France." in screen_text(app))
        assert "fake-model" in screen_text(app)
        backend = backends[0]
        (_, first_messages, first_ids), (_, second_messages, second_ids) = backend.submitted
        assert first_ids == [] and first_messages[0] == {"role": "system", "content": "Be brief."}
        assert second_messages[-1] == {"role": "user", "content": "Again"}
        assert second_messages[-2] == {"role": "assistant", "content": "Paris is the capital of France."}
        ids = chat.conversation.token_ids
        assert second_ids == ids[: len(second_ids)], "the next turn was sent the exact ids of the one before"
        spans = [m.token_span for m in chat.conversation.messages]
        assert spans[0][0] == 0 and spans[-1][1] == len(ids)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # each message's span, end to end
        await quit_app(pilot)
    with ChatStore(tmp_path / "data", readonly=True) as store:
        back = store.load_chat(chat.chat_id)
    assert back.token_ids == ids and [m.token_span for m in back.messages] == spans
    assert back.title == "What is the capital of France?"


async def test_a_refused_message_comes_back_into_the_box_with_what_was_typed_meanwhile(tmp_path):
    app, backends = fake_app(tmp_path, refuse_after_s=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        first = app.current
        app.chat_screen.prompt.load_text("a message the backend refuses")
        await press(pilot, "enter")
        # typed once the message has left the box (under load Enter's handler can run after `press` returns,
        # and it would then clear this text too)
        await wait_for(pilot, lambda: first.busy and app.chat_screen.prompt.message_text() == "")
        app.chat_screen.prompt.load_text("typed while it was queued")
        # (not `not first.busy`: on a loaded machine that can hold before the turn has even started)
        await wait_for(pilot, lambda: "a message the backend refuses" in app.chat_screen.prompt.message_text())
        await wait_for(pilot, lambda: not first.busy)
        box = app.chat_screen.prompt.message_text()
        assert "a message the backend refuses" in box and "typed while it was queued" in box
        assert first.conversation.messages == []  # the turn was undone, in memory and on disk
        # the same in a chat the user has left: the refused text waits in that chat's draft, switch or not
        backends[0].refuse_after_s = 3.0  # still busy when Ctrl+N comes, even on a loaded machine
        app.chat_screen.prompt.load_text("refused in the background")
        await press(pilot, "enter")
        await press(pilot, "ctrl+n")
        await wait_for(pilot, lambda: app.current is not first)  # (opening the new chat awaits the list)
        await wait_for(pilot, lambda: not first.busy)
        await press(pilot, "ctrl+down")  # back to the first chat (the list is newest first)
        await wait_for(pilot, lambda: app.current is first)
        await wait_for(pilot, lambda: "refused in the background" in app.chat_screen.prompt.message_text())
        await quit_app(pilot)
    with ChatStore(tmp_path / "data", readonly=True) as store:
        assert all(s.num_messages == 0 for s in store.list_chats())
