"""A chats file SQLite cannot read, one damaged chat in a good file, settings no turn can use, and writes a full
or read-only disk refuses: each is one clear line (or exception), the file keeps every byte it had, and the
store goes on working afterwards."""
from __future__ import annotations

import math
import re
import sqlite3

import pytest
from store_faults import DISK_FULL, READ_ONLY, failing_disk, file_contents

from llmchat.core.chats.conversation import ChatSettings, Message
from llmchat.core.chats.corruption import ChatsFileDamaged, DamagedChat, move_aside
from llmchat.core.chats.store import ChatStore
from llmchat.tui.commands.cli import main

GARBAGE = b"this is not a database, it is a text file someone saved over it\n" * 20
BAD_PAGES = b"SQLite format 3\x00" + bytes(range(256)) * 8  # SQLite's header, then nonsense (SQLite's own check)


def damaged_dir(tmp_path, contents: bytes = GARBAGE):
    data = tmp_path / "data"
    data.mkdir()
    (data / "chats.sqlite3").write_bytes(contents)
    return data


@pytest.mark.parametrize("contents", [GARBAGE, BAD_PAGES], ids=["text", "bad-pages"])
@pytest.mark.parametrize("argv", [["export"], ["export", "1"]])
def test_export_of_a_file_that_is_not_a_database_is_one_line_and_exit_2(tmp_path, capsys, argv, contents):
    data = damaged_dir(tmp_path, contents)
    assert main(["--data-dir", str(data), *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"llmchat: {data / 'chats.sqlite3'} is damaged (")
    assert "move it aside" in err  # what to do
    assert (data / "chats.sqlite3").read_bytes() == contents  # nothing lost


def test_a_damaged_file_lets_go_of_the_data_dir_and_moves_aside_whole(tmp_path):
    data = damaged_dir(tmp_path)
    (data / "chats.sqlite3-wal").write_bytes(b"wal bytes")
    for _ in range(2):  # the second open meets the same damage, not "in use by another llmchat" (its lock went)
        with pytest.raises(ChatsFileDamaged) as caught:
            ChatStore(data)
    moved = move_aside(caught.value.path, now=0)
    assert re.fullmatch(r"chats\.sqlite3\.corrupt-\d{8}-\d{6}", moved.name)
    assert moved.read_bytes() == GARBAGE and moved.with_name(moved.name + "-wal").read_bytes() == b"wal bytes"
    assert not (data / "chats.sqlite3").exists() and not (data / "chats.sqlite3-wal").exists()
    with ChatStore(data) as store:  # a fresh file
        assert store.list_chats() == []
        store.create_chat()
    (data / "chats.sqlite3").rename(data / "elsewhere")  # (a second damaged file the same second: a new name)
    (data / "chats.sqlite3").write_bytes(b"x" * 512)
    assert move_aside(data / "chats.sqlite3", now=0) != moved and moved.read_bytes() == GARBAGE


def null_text_allowed(db: sqlite3.Connection) -> None:
    """Rewrite the schema so messages.content may be NULL (a file from a buggy or foreign writer)."""
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    version = db.execute("PRAGMA schema_version").fetchone()[0]
    db.execute("PRAGMA writable_schema = ON")
    db.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'messages'", (sql.replace("content TEXT NOT NULL", "content TEXT"),))
    db.execute(f"PRAGMA schema_version = {version + 1}")
    db.execute("PRAGMA writable_schema = OFF")


def test_a_damaged_chat_is_skipped_and_the_others_open(tmp_path, capsys):
    data = tmp_path / "data"
    with ChatStore(data) as store:
        chats = [store.create_chat(title=f"chat {i}") for i in range(4)]
        for chat in chats:
            chat.start_turn(f"hello from {chat.title}")
        bad_blob, bad_text, bad_settings, good = chats
        null_text_allowed(store._db)
    with ChatStore(data) as store:
        db = store._db
        db.execute("UPDATE chats SET token_ids = x'01020304ff' WHERE chat_id = ?", (bad_blob.chat_id,))
        db.execute("UPDATE messages SET content = NULL WHERE chat_id = ? AND role = 'user'", (bad_text.chat_id,))
        db.execute("UPDATE chats SET max_tokens = ? WHERE chat_id = ?", (10**15, bad_settings.chat_id))
        before = file_contents(store.path)
        for chat, reason in [(bad_blob, "its token ids are a blob of 5 bytes, not int32s"),
                             (bad_text, "has a NoneType for its text"), (bad_settings, "max_tokens must be")]:
            with pytest.raises(DamagedChat, match=f"chat #{chat.chat_id} is damaged") as caught:
                store.load_chat(chat.chat_id)
            assert reason in str(caught.value) and "\n" not in str(caught.value)
        assert store.load_chat(good.chat_id).messages[0].content == "hello from chat 3"
        assert len(store.list_chats()) == 4  # the list still shows every chat
    assert file_contents(data / "chats.sqlite3") == before  # skipped, never "repaired"
    assert main(["--data-dir", str(data), "export", str(bad_blob.chat_id)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"chat #{bad_blob.chat_id} is damaged" in err
    assert main(["--data-dir", str(data), "export", str(good.chat_id)]) == 0


BAD_SETTINGS = [
    (ChatSettings(temperature=math.nan), "temperature must be a finite number"),
    (ChatSettings(temperature=math.inf), "temperature must be a finite number"),
    (ChatSettings(top_p=math.nan), "top_p must be a finite number"),
    (ChatSettings(max_tokens=10**30), "max_tokens must be a whole number from 1 to"),
    (ChatSettings(top_k=10**30), "top_k must be a whole number"),
    (ChatSettings(seed=2**63), "seed must be at most"),
]


@pytest.mark.parametrize("bad,complaint", BAD_SETTINGS)
def test_settings_no_turn_can_use_are_refused_before_any_sql(tmp_path, bad, complaint):
    with ChatStore(tmp_path / "data") as store:
        chat = store.create_chat()
        kept = chat.settings
        before = file_contents(store.path)
        for write in (lambda: chat.update_settings(bad), lambda: store.update_settings(chat.chat_id, bad),
                      lambda: store.create_chat(bad)):
            with pytest.raises(ValueError, match=complaint) as caught:
                write()
            assert "\n" not in str(caught.value)
        assert chat.settings is kept and not store._db.in_transaction
        assert file_contents(store.path) == before


WRITES = {  # each store write the app makes, on a chat that has one finished turn
    "new chat": lambda store, chat: store.create_chat(),
    "rename": lambda store, chat: chat.rename("A new title"),
    "delete": lambda store, chat: store.delete_chat(chat.chat_id),
    "settings": lambda store, chat: chat.update_settings(ChatSettings("Be brief.", 0.0, 1.0, 64)),
    "theme": lambda store, chat: store.set_setting("theme", "textual-light"),
    "turn": lambda store, chat: chat.start_turn("one more"),
    "import": lambda store, chat: store.add_chat(chat.branch(chat.messages[-1])),
}


@pytest.mark.parametrize("at", ["write", "commit"])
@pytest.mark.parametrize("error", [DISK_FULL, READ_ONLY])
@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_the_disk_refuses_is_rolled_back_and_the_store_goes_on(tmp_path, name, error, at):
    with ChatStore(tmp_path / "data") as store:
        chat = store.create_chat(title="kept")
        user, reply = chat.start_turn("hello")
        chat.finish_reply(reply, "hi there", "done", "stop")
        before = file_contents(store.path)
        with failing_disk(store, error, at) as disk, pytest.raises(sqlite3.OperationalError, match=error):
            WRITES[name](store, chat)
        assert disk.num_failures == 1
        assert not store._db.in_transaction  # rolled back, not left open for the next write to join
        assert file_contents(store.path) == before  # the whole transaction went: nothing half-written
        WRITES[name](store, chat)  # the disk has room again: the same write lands
        assert file_contents(store.path) != before
