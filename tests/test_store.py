"""core/chats/store.py: chats, messages, token ids and per-turn metrics survive a reopen; one writer per data dir."""
from __future__ import annotations

import math
import random
import sqlite3
import subprocess
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmchat.core.chats.conversation import DEFAULT_TITLE, TITLE_MAX_CHARS, ChatSettings, Message, title_from
from llmchat.core.api.metrics import RequestMetrics
from llmchat.core.chats.store import ChatStore, DataDirInUse
from llmchat.core.chats.rows import blob_to_ids, ids_to_blob, metrics_from_json, metrics_to_json

FIXTURES = Path(__file__).parent / "fixtures"


def metrics(rng: random.Random, tpot_nan: bool = False) -> RequestMetrics:
    num_prompt = rng.randrange(1, 5000)
    return RequestMetrics(
        num_prompt_tokens=num_prompt, num_cached_tokens=rng.randrange(0, num_prompt),
        num_output_tokens=rng.randrange(0, 600), queue_time=rng.random(), ttft=rng.random() * 3,
        tpot=float("nan") if tpot_nan else rng.random() / 10, num_preemptions=rng.randrange(3),
    )


def same_metrics(a: RequestMetrics, b: RequestMetrics) -> bool:
    def eq(x, y):
        return (isinstance(x, float) and math.isnan(x) and math.isnan(y)) or x == y

    return all(eq(getattr(a, f), getattr(b, f)) for f in a.__slots__)


@given(st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=300))
def test_token_ids_blob_round_trip(ids):
    assert blob_to_ids(ids_to_blob(ids)) == ids


def test_metrics_json_round_trip_keeps_nan():
    rng = random.Random(1)
    for nan in (False, True):
        m = metrics(rng, tpot_nan=nan)
        back = metrics_from_json(metrics_to_json(m))
        assert same_metrics(m, back)
    assert metrics_to_json(None) is None and metrics_from_json(None) is None


def test_title_from_first_line():
    assert title_from("\n\n  What is   the capital\tof France?\nmore") == "What is the capital of France?"
    long = "word " * 40
    t = title_from(long)
    assert len(t) == TITLE_MAX_CHARS and t.endswith("…")
    assert title_from("   \n ") == DEFAULT_TITLE


def turn(store: ChatStore, chat, text: str) -> tuple[Message, Message]:
    """A turn's first step on a chat the store loaded: start_turn stores both messages itself."""
    assert chat.store is store
    return chat.start_turn(text)


def test_chat_round_trip_after_reopen(tmp_path):
    rng = random.Random(7)
    token_ids = [rng.randrange(49152) for _ in range(rng.randrange(100, 2000))]
    m1, m2 = metrics(rng), metrics(rng, tpot_nan=True)
    with ChatStore(tmp_path) as store:
        chat = store.create_chat(ChatSettings("Be terse.", 0.2, 0.9, 64))
        assert chat.title == DEFAULT_TITLE and chat.title_auto and chat.token_ids == []
        user, reply = turn(store, chat, "Hello [bold]there[/bold]\x1b[31m")
        chat.begin_reply(user, reply, token_ids[:40])
        chat.extend_reply(reply, token_ids[40:50])
        chat.finish_reply(reply, "Hi!", "done", "stop", metrics=m1)
        user2, reply2 = turn(store, chat, "second")
        chat.begin_reply(user2, reply2, token_ids[:60])
        chat.extend_reply(reply2, token_ids[60:])
        chat.finish_reply(reply2, "cut", "stopped", "abort", metrics=m2)
    with ChatStore(tmp_path) as store:
        back = store.load_chat(chat.chat_id)
    assert back.title == "Hello [bold]there[/bold]\x1b[31m"  # raw text kept; display sanitises
    assert back.settings == ChatSettings("Be terse.", 0.2, 0.9, 64)
    assert back.token_ids == token_ids
    assert [(m.role, m.content, m.status, m.finish_reason, m.token_span) for m in back.messages] == [
        ("user", "Hello [bold]there[/bold]\x1b[31m", "done", None, (0, 40)),
        ("assistant", "Hi!", "done", "stop", (40, 50)),
        ("user", "second", "done", None, (50, 60)),
        ("assistant", "cut", "stopped", "abort", (60, len(token_ids))),
    ]
    assert same_metrics(back.messages[1].metrics, m1) and same_metrics(back.messages[3].metrics, m2)
    assert back.messages[0].metrics is None


def test_streaming_reply_survives_a_crash_as_interrupted(tmp_path):
    store = ChatStore(tmp_path)
    chat = store.create_chat()
    user, reply = turn(store, chat, "tell me a story")
    chat.begin_reply(user, reply, [5, 6])
    chat.extend_reply(reply, [7, 8], "Once upon")
    store.close()  # no finish_turn: as if the process had died mid-reply
    with ChatStore(tmp_path) as store:
        back = store.load_chat(chat.chat_id)
    assert back.messages[-1].content == "Once upon" and back.messages[-1].status == "interrupted"
    assert back.token_ids == [5, 6, 7, 8] and back.messages[-1].token_span == (2, 4)


def test_titles_rename_list_order_and_delete(tmp_path):
    with ChatStore(tmp_path) as store:
        a = store.create_chat()
        b = store.create_chat()
        turn(store, a, "first question")
        turn(store, a, "not the title")
        assert store.load_chat(a.chat_id).title == "first question"
        assert [c.chat_id for c in store.list_chats()] == [a.chat_id, b.chat_id]  # a was active last
        b.rename("  My   chat ")
        turn(store, b, "would have titled it")
        assert store.load_chat(b.chat_id).title == "My chat"
        assert [c.chat_id for c in store.list_chats()] == [b.chat_id, a.chat_id]
        assert {c.chat_id: c.num_messages for c in store.list_chats()} == {a.chat_id: 4, b.chat_id: 2}
        store.delete_chat(a.chat_id)
        assert [c.chat_id for c in store.list_chats()] == [b.chat_id]
        with pytest.raises(LookupError, match=str(a.chat_id)):
            store.load_chat(a.chat_id)
        with pytest.raises(LookupError):
            a.rename("gone")
        remaining = store._db.execute("SELECT COUNT(*) FROM messages WHERE chat_id = ?", (a.chat_id,)).fetchone()[0]
        assert remaining == 0  # messages went with their chat


def test_deleting_a_refused_first_turn_gives_the_title_back(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        user, reply = turn(store, chat, "way too long")
        assert store.load_chat(chat.chat_id).title == "way too long"
        chat.undo_turn(user, reply)
        back = store.load_chat(chat.chat_id)
        assert back.title == DEFAULT_TITLE and back.messages == []
        chat.rename("mine")
        user, reply = turn(store, chat, "refused too")
        chat.undo_turn(user, reply)
        assert store.load_chat(chat.chat_id).title == "mine"  # a title the user gave stays


def test_a_data_dir_of_the_previous_schema_opens_with_everything_intact(tmp_path):
    """tests/fixtures/v1_data was written by llmchat at schema 1 (main @36b3699), before token spans."""
    shutil.copytree(FIXTURES / "v1_data", tmp_path / "data")
    with ChatStore(tmp_path / "data") as store:
        assert store._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "2"
        chats = {c.title: c for c in store.list_chats()}
        assert set(chats) == {"What is the capital of France?", "Renamed [bold]chat[/]"}
        first = store.load_chat(chats["What is the capital of France?"].chat_id)
        assert first.settings == ChatSettings("You are terse.", 0.0, 0.9, 64)
        assert first.token_ids == list(range(1, 80))
        assert [(m.role, m.content, m.status, m.token_span) for m in first.messages] == [
            ("user", "What is the capital of France?", "done", None),
            ("assistant", "The capital of France is Paris.", "done", None),
            ("user", "And of Italy?\nSecond line", "done", None),
            ("assistant", "Rome", "interrupted", None),  # it was streaming when that app closed
        ]
        second = store.load_chat(chats["Renamed [bold]chat[/]"].chat_id)
        assert second.title_auto is False and second.messages == []
        assert store.get_setting("theme") == "textual-light"
        user, reply = first.start_turn("and Spain?")  # the migrated chat goes on, with spans from now on
        first.begin_reply(user, reply, first.token_ids + [7, 8])
        first.finish_reply(reply, "Madrid", "done", "stop")
    with ChatStore(tmp_path / "data") as store:
        again = store.load_chat(first.chat_id)
        assert again.messages[-2].token_span == (79, 81) and again.token_ids == list(range(1, 80)) + [7, 8]


def test_settings_and_app_settings(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        assert store.load_chat(chat.chat_id).settings == ChatSettings()
        store.update_settings(chat.chat_id, ChatSettings(None, 0.0, 0.5, 10))
        store.set_setting("theme", "textual-light")
    with ChatStore(tmp_path) as store:
        assert store.load_chat(chat.chat_id).settings == ChatSettings(None, 0.0, 0.5, 10)
        assert store.get_setting("theme") == "textual-light" and store.get_setting("missing", "d") == "d"


def test_failed_write_changes_nothing(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        before = store.list_chats()
        with pytest.raises(sqlite3.IntegrityError):
            orphan = Message("user", "orphan")
            store.add_messages(chat.__class__(chat.chat_id + 99), orphan)  # no such chat: FK fails
        assert store.list_chats() == before
        assert store._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


def test_a_batch_lands_whole_or_not_at_all(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        with pytest.raises(sqlite3.IntegrityError):
            with store.batch():
                store.add_messages(chat, Message("user", "kept only with its reply"))
                store.add_messages(chat.__class__(chat.chat_id + 1), Message("assistant", "no such chat"))
        assert store.load_chat(chat.chat_id).messages == [] and store.load_chat(chat.chat_id).title == DEFAULT_TITLE
        with store.batch():
            store.add_messages(chat, Message("user", "q"))
            store.add_messages(chat, Message("assistant", "a"))
        assert [m.content for m in store.load_chat(chat.chat_id).messages] == ["q", "a"]


def test_one_writer_per_data_dir_and_readers_allowed(tmp_path):
    store = ChatStore(tmp_path)
    chat = store.create_chat()
    with pytest.raises(DataDirInUse, match="--data-dir"):
        ChatStore(tmp_path)
    code = (
        "import sys; from llmchat.core.chats.store import ChatStore, DataDirInUse\n"
        "try:\n    ChatStore(sys.argv[1])\nexcept DataDirInUse as e:\n    print(e); sys.exit(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3 and "in use by another llmchat" in proc.stdout
    with ChatStore(tmp_path, readonly=True) as reader:  # export reads while the app runs
        assert [c.chat_id for c in reader.list_chats()] == [chat.chat_id]
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    ChatStore(tmp_path).close()  # the lock went with the first store


def test_readonly_needs_an_existing_store_and_newer_schema_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        ChatStore(tmp_path / "nowhere", readonly=True)
    with ChatStore(tmp_path) as store:
        store._db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(RuntimeError, match="newer llmchat"):
        ChatStore(tmp_path)


class _FailingCommit:
    """Stands in for the connection: COMMIT fails once (a full disk at commit time), the rest goes through."""

    def __init__(self, db) -> None:
        self._db = db
        self.failed = False

    def execute(self, sql, *args):
        if sql == "COMMIT" and not self.failed:
            self.failed = True
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_a_failed_commit_is_rolled_back_and_later_writes_land(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        real = store._db
        store._db = _FailingCommit(real)
        with pytest.raises(sqlite3.OperationalError, match="full"):
            turn(store, chat, "lost with its failed commit")
        assert not real.in_transaction, "the failed transaction was rolled back, not left open"
        store._db = real
        assert chat.messages == [] and chat.title == DEFAULT_TITLE, "start_turn undid what the store refused"
        turn(store, chat, "kept")
    with ChatStore(tmp_path) as store:
        assert [m.content for m in store.load_chat(chat.chat_id).messages] == ["kept", ""]
