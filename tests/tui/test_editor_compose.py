"""Compose in $EDITOR: the editor-running part on its own (a small script as the editor), and the app's path
through the pilot (Ctrl+E; the terminal hand-over, App.suspend, is a no-op there), failures one line each."""
from __future__ import annotations

import contextlib
import os
import sys

import pytest
from tui_helpers import SIZE, press, quit_app, wait_for

from llmchat.tui.actions.editor import EditorFailed, edit_in_editor, editor_command


def script(tmp_path, body: str) -> str:
    """An 'editor': a Python script run on the file's path (sys.argv[1])."""
    path = tmp_path / "editor.py"
    path.write_text("import sys\npath = sys.argv[1]\n" + body)
    return f"{sys.executable} {path}"


def test_the_editor_rewrites_the_draft_and_its_text_comes_back(tmp_path):
    seen = tmp_path / "seen"
    editor = script(tmp_path, f"open({str(seen)!r}, 'w').write(path)\ntext = open(path).read()\n"
                              "open(path, 'w').write(text.upper() + '\\nsecond line\\x1b[31m\\n')\n")
    assert edit_in_editor("a draft", editor_command({"EDITOR": editor})) == "A DRAFT\nsecond line␛[31m"
    edited_file = seen.read_text()
    assert edited_file.endswith(".md") and not os.path.exists(edited_file)  # a temporary file, gone afterwards


def test_visual_wins_and_an_unset_editor_is_one_line():
    assert editor_command({"VISUAL": "code --wait", "EDITOR": "nano"}) == ["code", "--wait"]
    assert editor_command({"VISUAL": " ", "EDITOR": "vi"}) == ["vi"]
    with pytest.raises(EditorFailed, match=r"no editor: set \$VISUAL or \$EDITOR"):
        editor_command({})
    with pytest.raises(EditorFailed, match="cannot be read as a command"):
        editor_command({"EDITOR": "vi 'unclosed"})


def test_an_editor_that_fails_or_is_missing_is_one_line(tmp_path):
    with pytest.raises(EditorFailed, match="exited with status 3"):
        edit_in_editor("x", editor_command({"EDITOR": script(tmp_path, "open(path, 'w').write('y')\nsys.exit(3)\n")}))
    with pytest.raises(EditorFailed, match="could not start the editor 'no-such-editor-here'"):
        edit_in_editor("x", ["no-such-editor-here"])


async def test_ctrl_e_puts_the_edited_draft_back_in_the_box_unsent(make_app, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITOR", script(tmp_path, "text = open(path).read()\n"
                                                  "open(path, 'w').write('Edited: ' + text + '\\n')\n"))
    monkeypatch.delenv("VISUAL", raising=False)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None)
        suspended = []

        @contextlib.contextmanager
        def suspend():  # the pilot has no terminal to hand over: count the hand-overs instead
            suspended.append(True)
            yield

        monkeypatch.setattr(app, "suspend", suspend)
        prompt = app.chat_screen.prompt
        prompt.load_text("my long\nprompt")
        await press(pilot, "ctrl+e")
        await wait_for(pilot, lambda: prompt.text.startswith("Edited"))
        assert prompt.text == "Edited: my long\nprompt" and suspended == [True]
        assert app.current.conversation.messages == []  # not sent

        monkeypatch.setenv("EDITOR", script(tmp_path, "open(path, 'w').write('lost')\nsys.exit(1)\n"))
        await press(pilot, "ctrl+e")
        await wait_for(pilot, lambda: any("exited with status 1; your draft is kept" in n.message
                                          for n in app._notifications))
        assert prompt.text == "Edited: my long\nprompt"
        await quit_app(pilot)


async def test_without_an_editor_or_a_terminal_the_draft_stays(make_app, monkeypatch):
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None)
        prompt = app.chat_screen.prompt
        await wait_for(pilot, lambda: app.focused is prompt)  # Ctrl+E is the prompt's key: it must have focus
        prompt.load_text("keep me")
        await press(pilot, "ctrl+e")
        # (wait for that notification: others, such as "ready", may come first on a loaded machine)
        await wait_for(pilot, lambda: any(n.message.startswith("no editor: set $VISUAL or $EDITOR")
                                          for n in app._notifications))
        monkeypatch.setenv("EDITOR", "true")
        await press(pilot, "ctrl+e")  # the pilot's terminal cannot be suspended: said, the draft stays
        await wait_for(pilot, lambda: any("cannot be handed to an editor" in n.message for n in app._notifications))
        assert prompt.text == "keep me" and os.environ["EDITOR"] == "true"
        await quit_app(pilot)
