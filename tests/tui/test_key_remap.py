"""Key bindings moved by the config file's [keys] table: the remapped key runs its action, a bad entry is one
line (naming the file, the line, the action) and that action keeps its default; `llmchat config` lists them."""
from __future__ import annotations

from pathlib import Path

import pytest
from tui_helpers import SIZE, press, quit_app, wait_for

from llmchat.core.user_config import KeyEntry, load_or_default
from llmchat.tui.commands import cli
from llmchat.tui.app import LlmChatApp
from llmchat.tui.text.key_bindings import key_problem, keymap_from, normalized
from llmchat.tui.screens.misconceptions import keys_text
from llmchat.tui.text.key_bindings import keys_now

CONFIG = """\
theme = "textual-dark"

[keys]
new_chat = "ctrl+t"      # where Ctrl+N does not reach the app
rename = "ctrl+nope"
no_such_action = "f6"
settings = "ctrl+t"
previous_chat = "alt+k,/"
"""


async def test_a_remapped_key_runs_its_action_and_bad_entries_keep_their_defaults(tmp_path, monkeypatch,
                                                                                   engine_factory):
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("LLMCHAT_CONFIG", str(path))
    config, problem = load_or_default()
    assert problem is None
    app = LlmChatApp(tmp_path / "data", engine_factory, user_config=config)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None)
        shown = [n.message for n in app._notifications]
        assert f"{path}, line 5: [keys] rename: 'ctrl+nope' is not a key" in "\n".join(shown)
        assert any(m.startswith(f"{path}, line 6: [keys] no_such_action is not an action; the actions are new_")
                   for m in shown)
        assert f"{path}, line 7: [keys] settings: ctrl+t is already given to new_chat in this file; " \
               "settings keeps ctrl+o" in shown
        assert all("\n" not in m for m in shown)

        app.chat_screen.prompt.load_text("a draft")  # (so that the chat is not "already empty")
        first = app.current_id
        app.current.conversation.start_turn("hello")  # a chat with a message: a new chat is made
        theme = app.theme
        await press(pilot, "ctrl+t")
        await wait_for(pilot, lambda: app.current_id != first)
        assert len(app.sessions) == 2 and app.theme == theme  # Ctrl+T made a chat; the theme key it had is gone
        second = app.current_id
        app.current.conversation.start_turn("hello again")
        await press(pilot, "ctrl+n")  # the old default no longer makes a chat
        await pilot.pause(0.2)
        assert app.current_id == second and len(app.sessions) == 2
        await press(pilot, "alt+k")  # a list of keys: each one works
        await wait_for(pilot, lambda: app.current_id == first)
        await press(pilot, "ctrl+r")  # a bad entry: the action keeps its default key
        await wait_for(pilot, lambda: app.screen.query("#text"))
        await press(pilot, "escape")
        await press(pilot, "ctrl+o")  # (settings' entry clashed: its default stays)
        await wait_for(pilot, lambda: app.screen.query("#top_k"))
        await press(pilot, "escape")
        await quit_app(pilot)


def test_llmchat_config_lists_the_effective_keys(tmp_path, monkeypatch, capsys):
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("LLMCHAT_CONFIG", str(path))
    assert cli.main(["config"]) == 2  # bad entries: said, as for any malformed line
    out, err = capsys.readouterr()
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert '"ctrl+t"' in lines["new_chat"] and "(file)" in lines["new_chat"]
    assert "(none)" in lines["toggle_theme"] and "ctrl+t given to new_chat" in lines["toggle_theme"]
    assert '"ctrl+r"' in lines["rename"] and "(default)" in lines["rename"]
    assert '"alt+k,slash"' in lines["previous_chat"]
    assert len(err.strip().splitlines()) == 3 and f"{path}, line 5: [keys] rename" in err

    path.write_text('[keys]\nexport = "f12"\n')
    assert cli.main(["config"]) == 0
    out = capsys.readouterr().out
    assert any(line.split()[:3] == ["export", "=", '"f12"'] for line in out.splitlines() if line.startswith("  "))
    path.write_text('keys = "ctrl+t"\n')  # not a table: the whole file is malformed, as any wrong type
    assert cli.main(["config"]) == 2
    assert "line 1: key 'keys' must be a table" in capsys.readouterr().err


@pytest.mark.parametrize("keys", ["ctrl+t", "f6", "escape", "alt+shift+up", "ctrl+up,alt+up", "?", "ctrl+slash", "x"])
def test_key_names_textual_knows_are_keys(keys):
    assert key_problem(keys) is None


@pytest.mark.parametrize("keys", ["", "   ", "ctrl+", "ctrl+nope", "cmd+t", "ctrl+ctrl+t", "f99", 7, None, "t,,x"])
def test_other_strings_are_not(keys):
    assert key_problem(keys) is not None


def test_entries_are_checked_one_by_one():
    defaults = {"new_chat": "ctrl+n", "rename": "ctrl+r"}
    keymap, problems = keymap_from((KeyEntry("new_chat", "ctrl+t", 2), KeyEntry("rename", "ctrl+t", 3),
                                    KeyEntry("rename", "/", 4)), Path("c.toml"), defaults)
    assert keymap == {"new_chat": "ctrl+t", "rename": "slash"} and normalized("ctrl+t,/") == "ctrl+t,slash"
    assert problems == ["c.toml, line 3: [keys] rename: ctrl+t is already given to new_chat in this file; "
                        "rename keeps ctrl+r"]


def test_the_palette_help_names_the_key_each_action_has_now():
    from llmchat.tui.actions.registry import ACTIONS, palette_help

    keys = keys_now({"new_chat": "ctrl+t", "edit_last": "f12", "previous_chat": "alt+k,slash"})
    by_id = {a.id: a for a in ACTIONS}
    assert palette_help(by_id["new_chat"], keys) == "start a new chat (Ctrl+T)"
    assert palette_help(by_id["edit_last"], keys).endswith("(F12, or e on a message)")
    assert palette_help(by_id["previous_chat"], keys) == "open the previous chat in the list (Alt+K)"
    assert palette_help(by_id["rename"], keys) == "give the current chat a title (Ctrl+R)"
    assert palette_help(by_id["toggle_theme"], keys) == "switch between the light and the dark theme"  # lost Ctrl+T
    assert palette_help(by_id["import_chat"], keys).endswith("wrote (JSON or Markdown)")  # palette only


def test_the_cache_help_screen_names_the_keys_the_actions_have_now():
    text = keys_text(keys_now({"regenerate": "ctrl+k", "block_map": "f2", "toggle_drafts": "ctrl+shift+d"}))
    assert "  Ctrl+K  regenerate the last reply" in text
    assert "  F2      the block map" in text
    assert "  —       (or e) edit a message and resend" in text  # its F2 went to the block map: palette only
    assert "  Ctrl+Shift+D mark accepted drafts" in text
    assert "  F1      this screen" in keys_text(keys_now({}))


async def test_the_input_boxs_editor_key_moves_too(tmp_path, monkeypatch, engine_factory):
    path = tmp_path / "config.toml"
    path.write_text('[keys]\ncompose_in_editor = "f6"\n')  # (F6 was the text area's select-line)
    monkeypatch.setenv("LLMCHAT_CONFIG", str(path))
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    app = LlmChatApp(tmp_path / "data", engine_factory, user_config=load_or_default()[0])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None)
        app.chat_screen.prompt.focus()
        await press(pilot, "ctrl+e")  # the old key: nothing
        await pilot.pause(0.2)
        assert not any("no editor" in n.message for n in app._notifications)
        await press(pilot, "f6")
        await wait_for(pilot, lambda: any("no editor: set $VISUAL" in n.message for n in app._notifications))
        await quit_app(pilot)
