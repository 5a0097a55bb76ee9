"""Compose a message in $VISUAL / $EDITOR: the draft goes to a temporary file, the editor runs on it, and what
it saved comes back (not sent: the user reads it in the input box and presses Enter).

`edit_in_editor` is the part that runs the editor (no Textual in it; tested on its own with a small script as
the editor); `compose_in_editor` is the app's action around it: it hands the terminal over (App.suspend) and
puts the result in the input box. Anything that goes wrong is one notification line and the draft stays.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.text.sanitize import safe_text

if TYPE_CHECKING:
    from ..app import LlmChatApp

EDITOR_VARIABLES = ("VISUAL", "EDITOR")


class EditorFailed(RuntimeError):
    """The editor could not run or did not finish well; str() is the one line to show."""


def editor_command(environ: dict[str, str] | None = None) -> list[str]:
    """$VISUAL, else $EDITOR, split as a shell would ("code --wait" -> two words); EditorFailed if neither is set."""
    environ = os.environ if environ is None else environ
    for name in EDITOR_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            try:
                words = shlex.split(value)
            except ValueError as e:
                raise EditorFailed(f"${name} ({value!r}) cannot be read as a command: {e}") from None
            if words:
                return words
    raise EditorFailed("no editor: set $VISUAL or $EDITOR (e.g. export EDITOR=nano) to compose in one")


def edit_in_editor(text: str, command: list[str]) -> str:
    """Run `command FILE` on a temporary file holding `text`; the file's text when the editor exits with 0.

    EditorFailed if it cannot start or exits otherwise. The trailing newline most editors add is dropped, and
    control characters are made visible, as for a paste.
    """
    with tempfile.TemporaryDirectory(prefix="llmchat-compose-") as folder:
        path = Path(folder) / "message.md"
        path.write_text(text, encoding="utf-8")
        name = command[0]
        try:
            status = subprocess.run([*command, str(path)], check=False).returncode
        except OSError as e:
            raise EditorFailed(f"could not start the editor {name!r}: {e.strerror or e}") from None
        if status != 0:
            raise EditorFailed(f"the editor {name!r} exited with status {status}")
        try:
            edited = path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise EditorFailed(f"could not read what the editor saved: {e.strerror or e}") from None
    return safe_text(edited[:-1] if edited.endswith("\n") else edited)


def compose_in_editor(app: "LlmChatApp") -> None:
    """The input box's draft in the editor, the terminal handed over meanwhile; the result back in the box."""
    from textual.app import SuspendNotSupported

    prompt = app.chat_screen.prompt
    draft = prompt.message_text()
    try:
        command = editor_command()
        with app.suspend():
            edited = edit_in_editor(draft, command)
    except SuspendNotSupported:
        app.notify("This terminal cannot be handed to an editor (no suspend here); your draft is kept.",
                   severity="warning")
        return
    except EditorFailed as e:
        app.notify(f"{e}; your draft is kept.", severity="warning", timeout=8, markup=False)
        return
    prompt.set_message(edited)
    prompt.focus()
    if edited != draft:
        app.notify("The edited message is in the input box: Enter sends it.", timeout=3)
