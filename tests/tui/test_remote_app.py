"""The app on a remote backend (`llmchat --backend URL`): it chats through a real `llmchat serve`, and when
the server dies mid-reply the chat says so in one line, keeps the reply as far as it got (marked, on disk
too) and stays usable. Panels a server does not feed say so."""
from __future__ import annotations

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.chats.store import ChatStore
from llmchat.tui.app import LlmChatApp
from llmchat.tui.bridge import remote_engine_factory

from fake_backend import FakeBackend
from serve_helpers import Server
from tui_helpers import SIZE, one_turn, press, quit_app, screen_text, wait_for


async def test_a_server_dying_mid_reply_is_one_line_and_the_reply_is_kept(tmp_path, tiny_model_dir):
    server = Server("--model", str(tiny_model_dir), "--kv-cache-gb", "0.01")
    try:
        app = LlmChatApp(tmp_path / "data", remote_engine_factory(server.url))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.bridge.ready)
            chat = app.current
            await one_turn(pilot, "Hello", ChatSettings(None, 0.0, 1.0, 8))
            first = chat.conversation.messages[-1]
            assert first.status == "done" and first.content and first.metrics.num_prompt_tokens > 0
            await wait_for(pilot, lambda: first.content[:20] in screen_text(app))
            assert "tiny-llama" in screen_text(app)

            settings = ChatSettings(None, 1.0, 1.0, 1000)
            app.store.update_settings(chat.chat_id, settings)
            chat.conversation.settings = settings
            app.chat_screen.prompt.load_text("Go on, at length")
            await press(pilot, "enter")
            await wait_for(pilot, lambda: chat.busy and chat.turn.num_output_tokens >= 3)
            server.kill()
            await wait_for(pilot, lambda: not chat.busy)
            reply = chat.conversation.messages[-1]
            assert reply.role == "assistant" and reply.status == "error" and reply.content
            assert "closed the connection mid-reply" in reply.error
            await wait_for(pilot, lambda: "The reply was cut short" in screen_text(app))

            app.chat_screen.prompt.load_text("Are you there?")  # the app goes on: this one cannot be sent
            await press(pilot, "enter")
            await wait_for(pilot, lambda: "cannot reach the server" in screen_text(app))
            assert "Are you there?" in app.chat_screen.prompt.message_text()
            kept = reply.content
            await quit_app(pilot)
        with ChatStore(tmp_path / "data", readonly=True) as store:
            stored = store.load_chat(chat.chat_id).messages
        assert [(m.role, m.status) for m in stored] == [("user", "done"), ("assistant", "done"),
                                                        ("user", "done"), ("assistant", "error")]
        assert stored[-1].content == kept
    finally:
        server.kill()


async def test_panels_say_what_a_server_does_not_report(tmp_path):
    app = LlmChatApp(tmp_path / "data", lambda progress, sink: FakeBackend(sink))  # a server without /metrics
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await wait_for(pilot, lambda: "not reported by this server" in screen_text(app))  # the KV panel
        assert "prefix cache hit rate not reported" in screen_text(app)
        await quit_app(pilot)
