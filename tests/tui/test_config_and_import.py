"""The config file in the app: its theme and sampling defaults at start; a malformed file is one line
(on stderr and as a notification) and the app starts on the defaults. And the palette's Import chat."""
from __future__ import annotations

from tui_helpers import SIZE, one_turn, press, quit_app, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.user_config import UserConfig
from llmchat.tui import run as run_module
from llmchat.tui.commands import cli
from llmchat.tui.app import LlmChatApp
from llmchat.tui.commands.export import chat_json


async def test_the_app_starts_with_the_files_theme_and_sampling_defaults(tmp_path, engine_factory):
    config = UserConfig(theme="nord", temperature=0.2, top_p=0.9, max_tokens=64)
    app = LlmChatApp(tmp_path / "data", engine_factory, user_config=config)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None)
        assert app.theme == "nord"
        s = app.current.settings
        assert (s.temperature, s.top_p, s.max_tokens) == (0.2, 0.9, 64)
        await quit_app(pilot)


async def test_a_malformed_file_is_a_notification_and_the_defaults(tmp_path, engine_factory):
    problem = "/x/config.toml, line 2: key 'foo' is unknown; the keys are model, device"
    app = LlmChatApp(tmp_path / "data", engine_factory, user_config=UserConfig(theme="no-such-theme"),
                     config_problem=problem)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None)
        shown = [n.message for n in app._notifications]
        assert problem in shown and any("'no-such-theme' is unknown" in m for m in shown)
        assert app.theme == "textual-dark" and app.current.settings.temperature == 0.7
        await quit_app(pilot)


def test_llmchat_with_a_malformed_file_starts_with_defaults(tmp_path, monkeypatch, capsys):
    path = tmp_path / "config.toml"
    path.write_text("theme = 'nord'\ntop_p = 2\n")
    monkeypatch.setenv("LLMCHAT_CONFIG", str(path))
    made: dict = {}

    class RecordingApp:  # the real app's arguments, without starting a terminal UI
        return_code = 0

        def __init__(self, data_dir, factory, **kwargs):
            made.update(kwargs)

        def run(self):
            made["ran"] = True

    monkeypatch.setattr(run_module, "LlmChatApp", RecordingApp)  # (where run_app looks it up)
    assert cli.main(["--data-dir", str(tmp_path / "d")]) == 0
    assert made["ran"] and made["user_config"] == UserConfig() and "line 2: key 'top_p'" in made["config_problem"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2: key 'top_p' must be a number in (0, 1]" in err[0]

    path.write_text("theme = 'nord'\nkv_cache_gb = 0.25\ndevice = 'cpu'\n")
    made.clear()
    assert cli.main(["--data-dir", str(tmp_path / "d")]) == 0
    assert made["user_config"].theme == "nord" and made["config_problem"] is None
    assert made["engine_config"].kv_cache_bytes == 250_000_000
    made.clear()
    assert cli.main(["--data-dir", str(tmp_path / "d"), "--kv-cache-gb", "0.5"]) == 0  # the flag wins
    assert made["engine_config"].kv_cache_bytes == 500_000_000



async def test_import_from_the_palette_continues_the_chat_on_its_ids(make_app, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "Tell me about paged attention and its block tables", ChatSettings(None, 0.0, 1.0, 8))
        original = app.current.conversation
        export = tmp_path / "chat.json"
        export.write_text(chat_json(original))
        bad = tmp_path / "bad.json"
        bad.write_text('{"title": "x", "messages": [{"role": "robot"}], "token_ids": []}')

        await press(pilot, "ctrl+p", *"Import chat")
        await pilot.pause(0.3)
        await press(pilot, "enter")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "TextPromptScreen" and app.screen.query("#text"))
        app.screen.query_one("#text").value = str(bad)
        await press(pilot, "enter")
        await wait_for(pilot, lambda: any("messages[0].role" in n.message for n in app._notifications))
        assert len(app.sessions) == 1  # nothing imported

        app.action_import_chat()
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "TextPromptScreen" and app.screen.query("#text"))
        app.screen.query_one("#text").value = str(export)
        await press(pilot, "enter")
        await wait_for(pilot, lambda: len(app.sessions) == 2 and app.current.conversation is not original)
        imported = app.current.conversation
        assert imported.token_ids == original.token_ids and "Tell me about paged" in screen_text(app)

        await one_turn(pilot, "and why 16 tokens?", ChatSettings(None, 0.0, 1.0, 4))
        user, reply = imported.messages[-2:]
        assert user.token_span[0] == len(original.token_ids)  # the next turn extends the imported ids
        assert imported.token_ids[: len(original.token_ids)] == original.token_ids
        # every full block the original's turn computed (its last generated id has no KV yet) is reused
        assert reply.metrics.num_cached_tokens >= 16 * ((len(original.token_ids) - 1) // 16) > 0
        await quit_app(pilot)
