"""Pilot tests of the chat workflow on a real engine (tiny random-weight model): several chats streaming
at once, switching, stopping, renaming, deleting, and finding everything again after a restart."""
from __future__ import annotations

import re

from tui_helpers import SIZE, press, quit_app, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.chats.store import ChatStore
from llmchat.tui.screens.dialogs import ConfirmScreen, TextPromptScreen


def set_settings(app, session, settings: ChatSettings) -> None:
    app.store.update_settings(session.chat_id, settings)
    session.conversation.settings = settings


async def send(pilot, text: str) -> None:
    app = pilot.app
    app.chat_screen.prompt.focus()
    app.chat_screen.prompt.load_text(text)
    await press(pilot, "enter")


def streaming(session, num_tokens: int = 3) -> bool:
    return session.turn is not None and session.turn.num_output_tokens >= num_tokens


async def test_two_chats_stream_at_once_then_switch_stop_rename_delete_and_restart(make_app, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        first = app.current
        set_settings(app, first, ChatSettings(None, 0.0, 1.0, 600))
        await send(pilot, "Tell me a long story")
        await wait_for(pilot, lambda: streaming(first))
        assert app.chat_screen.prompt.text == ""  # the input is cleared once the message is sent

        await press(pilot, "ctrl+n")
        await wait_for(pilot, lambda: app.current is not first)  # the new chat is open
        second = app.current
        assert second.settings == first.settings  # a new chat inherits the settings
        set_settings(app, second, ChatSettings(None, 0.0, 1.0, 200))
        await send(pilot, "And a short one")
        await wait_for(pilot, lambda: streaming(second) and streaming(first, 10))
        await wait_for(pilot, lambda: app.bridge.stats().num_running == 2)  # one batch, two sequences

        # switch back to the first chat (Ctrl+Up: the list is newest first) while both stream
        await press(pilot, "ctrl+down")
        assert app.current is first
        await wait_for(pilot, lambda: "Tell me a long story" in screen_text(app) and "streaming" in screen_text(app))

        # Esc stops the first reply; what it wrote so far is kept
        await press(pilot, "escape")
        await wait_for(pilot, lambda: not first.busy)
        reply = first.conversation.messages[-1]
        assert reply.status == "stopped" and reply.finish_reason == "abort", (reply.metrics, reply.finish_reason)
        assert 10 <= reply.metrics.num_output_tokens < 600 and reply.content
        await wait_for(pilot, lambda: "stopped" in screen_text(app))  # the reply's footer repaints on the next frame
        await wait_for(pilot, lambda: not second.busy)
        assert second.conversation.messages[-1].status == "done"

        # the KV panel lists each chat's blocks and the one block they share (the default system prompt)
        def kv_lines():
            return str(app.chat_screen.query_one("#kv-chats").render())
        def listed(s) -> bool:
            blocks = (len(s.conversation.token_ids) - 1) // 16  # the last sampled token was never fed: no KV
            return bool(re.search(rf"#{s.chat_id} +{re.escape(s.conversation.title[:14])}.* {blocks:>4} · +1$",
                                  kv_lines(), re.M))
        await wait_for(pilot, lambda: first.chat_id in app.resident and second.chat_id in app.resident
                       and listed(first) and listed(second))
        assert second.conversation.messages[-1].metrics.num_output_tokens == 200

        # each chat's ids are its prompt ids + reply ids, exactly
        for s in (first, second):
            m = s.conversation.messages[-1].metrics
            assert len(s.conversation.token_ids) == m.num_prompt_tokens + m.num_output_tokens

        # rename the second chat
        await press(pilot, "ctrl+up")
        assert app.current is second
        await press(pilot, "ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, TextPromptScreen) and app.screen.query("#text"))
        app.screen.query_one("#text").value = ""
        await press(pilot, *"Short stories", "enter")
        await pilot.pause()
        assert second.conversation.title == "Short stories" and "Short stories" in screen_text(app)

        # a third chat, then delete it: n keeps it, y deletes it
        await press(pilot, "ctrl+n")
        await wait_for(pilot, lambda: app.current not in (first, second))  # the new chat is open
        third = app.current
        await send(pilot, "to be deleted")
        await wait_for(pilot, lambda: streaming(third, 1))
        await press(pilot, "ctrl+d")
        assert isinstance(app.screen, ConfirmScreen)
        await press(pilot, "n")
        assert third.chat_id in app.sessions
        await press(pilot, "ctrl+d")
        await press(pilot, "y")
        await wait_for(pilot, lambda: third.chat_id not in app.sessions)
        assert f"#{third.chat_id}" not in screen_text(app)
        expected = {cid: (s.conversation.title, [(m.role, m.content, m.status) for m in s.conversation.messages],
                          list(s.conversation.token_ids), [m.metrics for m in s.conversation.messages])
                    for cid, s in app.sessions.items()}
        await quit_app(pilot)

    with ChatStore(tmp_path / "data") as store:  # what is on disk
        assert {c.chat_id for c in store.list_chats()} == set(expected)

    app2 = make_app()
    async with app2.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app2.bridge.ready)
        found = {cid: (s.conversation.title, [(m.role, m.content, m.status) for m in s.conversation.messages],
                       list(s.conversation.token_ids), [m.metrics for m in s.conversation.messages])
                 for cid, s in app2.sessions.items()}
        assert found.keys() == expected.keys()
        for cid in expected:  # titles, messages, token ids and metrics (NaN-free fields compare equal)
            assert found[cid][:3] == expected[cid][:3]
            assert [m and (m.num_prompt_tokens, m.num_cached_tokens, m.num_output_tokens, m.ttft)
                    for m in found[cid][3]] == [m and (m.num_prompt_tokens, m.num_cached_tokens,
                                                       m.num_output_tokens, m.ttft) for m in expected[cid][3]]
        text = screen_text(app2)
        assert "Short stories" in text and "Tell me a long st" in text
        # the newest chat opens first, with its reply and the reply's metrics line
        assert app2.current.chat_id == second.chat_id
        assert "TTFT" in text and "200 tokens" in text

        # continuing the restarted chat extends its stored ids exactly
        stored_ids = list(app2.current.conversation.token_ids)
        await send(pilot, "One more")
        session = app2.current
        await wait_for(pilot, lambda: session.turn is None or session.turn.prompt_ids is not None)
        prompt_ids = session.conversation.token_ids if session.turn is None else session.turn.prompt_ids
        assert prompt_ids[: len(stored_ids)] == stored_ids
        await wait_for(pilot, lambda: not session.busy)


async def test_next_turn_reuses_the_chat_prefix_and_the_panel_says_so(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chat = app.current
        set_settings(app, chat, ChatSettings(None, 0.0, 1.0, 30))
        await send(pilot, "first turn")
        await wait_for(pilot, lambda: len(chat.conversation.messages) == 2 and not chat.busy)
        ids_after_first = list(chat.conversation.token_ids)
        await send(pilot, "second turn")
        await wait_for(pilot, lambda: len(chat.conversation.messages) == 4 and not chat.busy)
        m = chat.conversation.messages[-1].metrics
        full_blocks = len(ids_after_first) // 16 * 16
        assert m.num_cached_tokens == full_blocks > 0  # every full block of the first turn came from the cache
        reused = f"reused {m.num_cached_tokens:,} of {m.num_prompt_tokens:,} prompt tokens"
        await wait_for(pilot, lambda: reused in screen_text(app))
        text = screen_text(app)
        assert f"cached {m.num_cached_tokens:,} · prefilled {m.num_prompt_tokens - m.num_cached_tokens:,}" in text
        assert "last turn of 2 in this chat" in text


async def test_settings_dialog_validates_and_saves(make_app, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        chat = app.current
        await press(pilot, "ctrl+o")
        await wait_for(pilot, lambda: app.screen.query("#temperature"))  # the dialog is composed
        dialog = app.screen
        dialog.query_one("#temperature").value = "-1"
        await press(pilot, "ctrl+s")
        assert app.screen is dialog and "temperature must be >= 0" in str(dialog.query_one("#settings-error").render())
        dialog.query_one("#temperature").value = "0.3"
        dialog.query_one("#top_p").value = "0.9"
        dialog.query_one("#max_tokens").value = "77"
        dialog.query_one("#system").load_text("You are terse.")
        await press(pilot, "ctrl+s")
        await wait_for(pilot, lambda: chat.settings == ChatSettings("You are terse.", 0.3, 0.9, 77))
        assert "temp 0.3 · top-p 0.9 · max 77 · custom system" in screen_text(app)
        await quit_app(pilot)
    with ChatStore(tmp_path / "data") as store:
        assert store.load_chat(chat.chat_id).settings == ChatSettings("You are terse.", 0.3, 0.9, 77)


async def test_the_view_follows_the_stream_until_the_user_scrolls_up(make_app):
    app = make_app()
    async with app.run_test(size=(150, 30)) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chat = app.current
        set_settings(app, chat, ChatSettings(None, 0.0, 1.0, 900))
        await send(pilot, "a long one please")
        view = app.chat_screen.transcript
        await wait_for(pilot, lambda: view.max_scroll_y > 5)
        await wait_for(pilot, lambda: view.scroll_y >= view.max_scroll_y - 1, timeout=5)  # following the stream
        view.focus()
        await pilot.pause(0.1)
        await press(pilot, "pageup")
        await pilot.pause(0.5)  # (the scroll animates)
        held, bottom = view.scroll_y, view.max_scroll_y
        assert held < bottom, (app.focused, view.can_focus, held, bottom)
        await wait_for(pilot, lambda: view.max_scroll_y > bottom + 3)
        assert view.scroll_y == held  # the reader stays where they scrolled
        await press(pilot, "end")
        await wait_for(pilot, lambda: view.max_scroll_y > bottom + 6)
        await wait_for(pilot, lambda: view.scroll_y >= view.max_scroll_y - 1, timeout=5)  # following again
        await press(pilot, "escape")
        await wait_for(pilot, lambda: not chat.busy)


async def test_each_panel_explains_itself_on_hover_and_focus(make_app):
    from llmchat.tui.widgets.panels import EXPLAIN

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        for key, text in EXPLAIN.items():
            panel = app.chat_screen.query_one(f"#panel-{key}")
            assert panel.tooltip == text
            assert text[:30] not in screen_text(app)
            panel.focus()
            await wait_for(pilot, lambda: text[:30] in screen_text(app).replace("\n", " ")
                           or text.split()[0] in screen_text(app))
