"""Top-k, seed and stop strings in the chat settings dialog: checked there (a bad value is one line, the dialog
stays and nothing changes), stored with the chat, and applied to the chat's next turn on the real engine
(tiny random model): a stop string cuts the reply, a seed reproduces a sampled reply, top-k 1 is greedy."""
from __future__ import annotations

from tui_helpers import SIZE, one_turn, press, quit_app, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.chats.store import ChatStore

PROMPT = "Tell me a story about paged attention"


async def open_settings(pilot):
    app = pilot.app
    await press(pilot, "ctrl+o")
    await wait_for(pilot, lambda: app.screen.query("#top_k"))
    return app.screen


def error_line(dialog) -> str:
    return str(dialog.query_one("#settings-error").render())


async def test_the_dialog_checks_top_k_seed_and_stop_strings_then_saves_them(make_app, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        chat = app.current
        before = ChatSettings(**{f: getattr(chat.settings, f) for f in ChatSettings.__slots__})
        dialog = await open_settings(pilot)
        for field, value, complaint in [
            ("#top_k", "-3", "top-k must be a whole number >= 0 (0 or empty: off), got '-3'"),
            ("#seed", "-1", "seed must be a whole number from 0 to"),
            ("#stop", "a\\q", "stop string 1: unknown escape \\q (use \\n, \\t or \\\\)"),
            ("#stop", "\n".join(f"s{i}" for i in range(9)), "at most 8 stop strings (one per line), got 9"),
        ]:
            widget = dialog.query_one(field)
            old = widget.value if field != "#stop" else widget.text
            if field == "#stop":
                widget.load_text(value)
            else:
                widget.value = value
            await press(pilot, "ctrl+s")
            assert app.screen is dialog and complaint in error_line(dialog)
            assert "\n" not in error_line(dialog).strip()  # one line
            assert chat.settings == before and app.store.load_chat(chat.chat_id).settings == before
            widget.load_text(old) if field == "#stop" else setattr(widget, "value", old)
        dialog.query_one("#top_k").value = "40"
        dialog.query_one("#seed").value = "1234"
        dialog.query_one("#stop").load_text("User:\n\\n\\n\n")
        await press(pilot, "ctrl+s")
        await wait_for(pilot, lambda: app.screen is not dialog)
        wanted = ChatSettings(None, before.temperature, before.top_p, before.max_tokens, 40, 1234, ("User:", "\n\n"))
        assert chat.settings == wanted
        assert "top-k 40 · seed 1234 · 2 stop strings" in screen_text(app)
        dialog = await open_settings(pilot)  # the dialog shows them as saved
        assert (dialog.query_one("#top_k").value, dialog.query_one("#seed").value) == ("40", "1234")
        assert dialog.query_one("#stop").text == "User:\n\\n\\n"
        await press(pilot, "escape")
        await quit_app(pilot)
    with ChatStore(tmp_path / "data") as store:
        assert store.load_chat(chat.chat_id).settings == wanted


async def new_chat_turn(pilot, settings: ChatSettings) -> tuple[str, str | None]:
    """A new chat, PROMPT with these settings; (its reply, the finish reason)."""
    app = pilot.app
    await press(pilot, "ctrl+n")
    await wait_for(pilot, lambda: not app.current.conversation.messages)
    await one_turn(pilot, PROMPT, settings)
    reply = app.current.conversation.messages[-1]
    return reply.content, reply.finish_reason


async def test_stop_strings_seed_and_top_k_reach_the_engine(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        greedy = ChatSettings(None, 0.0, 1.0, 24)
        full, reason = await new_chat_turn(pilot, greedy)
        assert reason == "length" and len(full) > 10
        cut_at = next(i for i in range(len(full) // 3, len(full) - 3) if full[i:i + 3].strip() == full[i:i + 3])
        stop = full[cut_at:cut_at + 3]
        cut_at = full.find(stop)
        stopped, reason = await new_chat_turn(pilot, ChatSettings(None, 0.0, 1.0, 24, stop=("never there", stop)))
        assert (stopped, reason) == (full[:cut_at], "stop")  # the reply ends before its stop string

        sampled = ChatSettings(None, 1.0, 1.0, 16, top_k=50, seed=1234)
        first, _ = await new_chat_turn(pilot, sampled)
        again, _ = await new_chat_turn(pilot, sampled)
        other_seed, _ = await new_chat_turn(pilot, ChatSettings(None, 1.0, 1.0, 16, top_k=50, seed=99))
        assert first == again != other_seed  # a seed reproduces a sampled reply; another seed, another reply
        top_one, _ = await new_chat_turn(pilot, ChatSettings(None, 1.0, 1.0, 24, top_k=1))
        assert top_one == full  # top-k 1 leaves only the most likely token: greedy
        await quit_app(pilot)
