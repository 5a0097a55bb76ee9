"""The app on a damaged chats file, with a damaged chat, and on a disk that refuses writes: `llmchat` asks before
moving a damaged file aside (no: one line, exit 2), a damaged chat is skipped with one notice, the settings
dialog refuses NaN and huge values, and every write the disk refuses (full, read-only) keeps the app running
with one notice, the change in memory and the file exactly as it was."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from fake_backend import FakeBackend
from store_faults import DISK_FULL, READ_ONLY, failing_disk, file_contents
from textual.widgets import Input
from tui_helpers import SIZE, press, quit_app, screen_text, wait_for

from llmchat.core.chats.corruption import ChatsFileDamaged
from llmchat.core.chats.store import ChatStore
from llmchat.tui import run as run_module
from llmchat.tui.app import LlmChatApp
from llmchat.tui.commands import cli
from llmchat.tui.screens import damaged_file
from llmchat.tui.screens.dialogs import ConfirmScreen, SettingsScreen, TextPromptScreen

GARBAGE = b"not a database: a note someone saved over the chats file\n" * 10


def fake_app(data_dir) -> LlmChatApp:
    return LlmChatApp(data_dir, lambda progress, sink: FakeBackend(sink, reply="A reply."))


def notices(app, text: str = "Could not") -> list[str]:
    return [n.message for n in app._notifications if text in n.message]


# -- a damaged file -----------------------------------------------------------------------------
@pytest.mark.parametrize("answer", [False, True])
def test_llmchat_on_a_damaged_file_asks_then_moves_it_aside_or_exits_2(tmp_path, monkeypatch, capsys, answer):
    data = tmp_path / "data"
    data.mkdir()
    (data / "chats.sqlite3").write_bytes(GARBAGE)
    asked, started = [], []

    class Question:  # MoveAsideApp without a terminal: the user's answer
        def __init__(self, damage):
            asked.append(damage)

        def run(self):
            return answer

    class RecordingApp:  # the real app's store, without starting a terminal UI
        return_code = 0

        def __init__(self, data_dir, factory, **kwargs):
            self.store = ChatStore(data_dir)  # ChatsFileDamaged, as the real app raises it

        def run(self):
            started.append(self.store.list_chats())
            self.store.close()

    monkeypatch.setattr(damaged_file, "MoveAsideApp", Question)
    monkeypatch.setattr(run_module, "LlmChatApp", RecordingApp)
    code = cli.main(["--data-dir", str(data)])
    err = capsys.readouterr().err
    assert len(asked) == 1 and asked[0].path == data / "chats.sqlite3" and err.count("\n") == 1
    if not answer:  # the file stays, untouched; one line says what to do
        assert code == 2 and not started and (data / "chats.sqlite3").read_bytes() == GARBAGE
        assert f"{data / 'chats.sqlite3'} is damaged (file is not a database); nothing was changed" in err
        return
    assert code == 0 and started == [[]]  # the app started on a fresh, empty file
    kept = [p for p in data.iterdir() if re.fullmatch(r"chats\.sqlite3\.corrupt-\d{8}-\d{6}", p.name)]
    assert len(kept) == 1 and kept[0].read_bytes() == GARBAGE and f"to {kept[0]}" in err


async def test_the_move_aside_question_names_the_file_and_takes_y_or_n(tmp_path):
    # a short path: a long one (pytest's tmp dirs grow with the run number) wraps inside its own characters
    damage = ChatsFileDamaged(Path("/data/chats.sqlite3"), "file is not a database")
    for key, wanted in (("y", True), ("n", False), ("escape", False)):
        app = damaged_file.MoveAsideApp(damage)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            text = " ".join(re.sub("[█▀▄▁▔]", " ", screen_text(app)).split())  # the text, not the dialog's frame
            assert "chats.sqlite3 cannot be read (file is not a database)" in text and "Move aside (y)" in text
            await press(pilot, key)
        assert app.return_value is wanted


# -- a damaged chat ------------------------------------------------------------------------------
async def test_a_damaged_chat_is_skipped_with_one_notice_and_the_others_open(tmp_path):
    data = tmp_path / "data"
    with ChatStore(data) as store:
        chats = [store.create_chat() for _ in range(3)]
        for i, chat in enumerate(chats):
            chat.start_turn(f"message {i}")
        store._db.execute("UPDATE chats SET token_ids = x'0102' WHERE chat_id = ?", (chats[1].chat_id,))
    before = file_contents(data / "chats.sqlite3")
    app = fake_app(data)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None)
        assert sorted(app.sessions) == [chats[0].chat_id, chats[2].chat_id]
        shown = notices(app, "is damaged")
        assert shown == [f"Chat #{chats[1].chat_id} is damaged (its token ids are a blob of 2 bytes, not int32s); "
                         "it was skipped and left as it is in the file; the other chats opened."]
        await quit_app(pilot)
    assert [r for r in file_contents(data / "chats.sqlite3") if "INSERT INTO \"chats\"" in r] == \
           [r for r in before if "INSERT INTO \"chats\"" in r]  # the damaged row is still there, as it was


# -- settings no turn can use ---------------------------------------------------------------------
@pytest.mark.parametrize("field,value,complaint", [
    ("#temperature", "nan", "temperature must be a finite number"),
    ("#temperature", "1e999", "temperature must be a finite number"),
    ("#max_tokens", str(10**30), "max_tokens must be a whole number from 1 to 1048576"),
])
async def test_the_settings_dialog_refuses_nan_and_huge_values_in_one_line(tmp_path, field, value, complaint):
    app = fake_app(tmp_path / "data")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None)
        session, before = app.current, app.current.settings
        await press(pilot, "ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.query("#temperature"))
        dialog = app.screen
        dialog.query_one(field, Input).value = value
        await press(pilot, "ctrl+s")
        error = str(dialog.query_one("#settings-error").render())
        assert app.screen is dialog and complaint in error and "\n" not in error.strip()
        assert session.settings is before and app.store.load_chat(session.chat_id).settings == before
        await press(pilot, "escape")
        await quit_app(pilot)


# -- writes the disk refuses ----------------------------------------------------------------------
async def rename(pilot):
    await press(pilot, "ctrl+r")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, TextPromptScreen))
    pilot.app.screen.query_one(Input).value = "Renamed in memory"
    await press(pilot, "enter")


async def delete(pilot):
    await press(pilot, "ctrl+d")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
    await press(pilot, "y")


async def settings(pilot):
    await press(pilot, "ctrl+o")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SettingsScreen)
                   and pilot.app.screen.query("#temperature"))  # (mounted, not only pushed)
    pilot.app.screen.query_one("#temperature", Input).value = "0.25"
    await press(pilot, "ctrl+s")


async def send(pilot):
    await wait_for(pilot, lambda: pilot.app.bridge.ready)
    pilot.app.chat_screen.prompt.load_text("a message the disk cannot take")
    await press(pilot, "enter")


OPS = {  # the action, then what stays true in memory afterwards (session: the chat that was current)
    "new chat": (lambda pilot: press(pilot, "ctrl+n"),
                 lambda app, session: app.current_id < 0 and app.current.conversation.store is None),
    "rename": (rename, lambda app, session: session.conversation.title == "Renamed in memory"),
    "delete": (delete, lambda app, session: app.current is session and session.chat_id in app.sessions),
    "settings": (settings, lambda app, session: session.settings.temperature == 0.25),
    "theme": (lambda pilot: press(pilot, "ctrl+t"), lambda app, session: app.theme == "textual-light"),
    "send": (send, lambda app, session: "a message the disk cannot take" in app.chat_screen.prompt.message_text()),
}


@pytest.mark.parametrize("error", [DISK_FULL, READ_ONLY])
@pytest.mark.parametrize("name", list(OPS))
async def test_a_write_the_disk_refuses_keeps_the_app_alive_with_one_notice(tmp_path, name, error):
    data = tmp_path / "data"
    with ChatStore(data) as store:  # a chat with a message (Ctrl+N on an empty chat writes nothing)
        store.create_chat().start_turn("already here")
    app = fake_app(data)
    act, holds = OPS[name]
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.current is not None and app.bridge.ready)
        session = app.current
        before = file_contents(app.store.path)
        with failing_disk(app.store, error, at="commit") as disk:
            await act(pilot)
            await wait_for(pilot, lambda: notices(app))
            await pilot.pause(0.1)
        assert disk.num_failures == 1 and app.is_running
        shown = notices(app)
        assert len(shown) == 1 and error in shown[0] and str(app.store.path) in shown[0]
        assert holds(app, session)
        assert not app.store._db.in_transaction and file_contents(app.store.path) == before  # rolled back
        await rename(pilot)  # the disk has room again: writes land
        await wait_for(pilot, lambda: app.store.load_chat(app.current.chat_id).title == "Renamed in memory"
                       if app.current.conversation.store is not None else True)
        await quit_app(pilot)
