"""core/chats/origin.py: how a chat continued a full one (the choice, its price, what it measured) is stored with
the new chat, gains its first turn's metrics once, survives a reopen, goes with the chat, and a file without the
table (an older llmchat's) reads as "began on its own"."""
from __future__ import annotations

import math
import sqlite3

from llmchat.core.api.metrics import RequestMetrics
from llmchat.core.chats.conversation import Conversation, Message
from llmchat.core.chats.origin import ChatOrigin
from llmchat.core.chats.store import ChatStore

SUMMARY = RequestMetrics(950, 900, 60, 0.01, 0.4, 0.02)
FIRST = RequestMetrics(300, 0, 4, 0.0, 0.7, 0.03)


def test_origin_is_stored_with_the_chat_gains_its_first_turn_once_and_survives_a_reopen(tmp_path):
    with ChatStore(tmp_path) as store:
        full = store.create_chat()
        origin = ChatOrigin(full.chat_id, "summary", 0, 420, 2.5, summary=SUMMARY)
        new = store.add_chat(Conversation(0, "continued", False, origin=origin))
        assert new.origin == origin and store.load_chat(full.chat_id).origin is None
        user, reply = new.start_turn("hello")
        reply.metrics = None
        new.record_first_turn(reply)  # no metrics yet: nothing recorded
        assert store.load_chat(new.chat_id).origin.first_turn is None
        new.finish_reply(reply, "hi", "done", "stop", metrics=FIRST)
        new.record_first_turn(reply)
        _, second = new.start_turn("again")
        new.finish_reply(second, "yes", "done", "stop", metrics=SUMMARY)
        new.record_first_turn(second)  # a later turn changes nothing
    with ChatStore(tmp_path) as store:
        loaded = store.load_chat(new.chat_id).origin
        assert loaded == ChatOrigin(full.chat_id, "summary", 0, 420, 2.5, summary=SUMMARY, first_turn=FIRST)
        store.delete_chat(new.chat_id)
        assert store._db.execute("SELECT COUNT(*) FROM chat_origins").fetchone()[0] == 0


def test_a_fork_records_its_origin_and_an_unpriced_choice_keeps_nan(tmp_path):
    with ChatStore(tmp_path) as store:
        full = store.create_chat()
        user, reply = full.start_turn("one")
        full.finish_reply(reply, "two", "done", "stop")
        fork = full.branch(reply, "fork to fit", ChatOrigin(full.chat_id, "fork", 2, 12, math.nan))
        assert full.branch(reply).origin is None  # an ordinary fork began on its own
    with ChatStore(tmp_path) as store:
        origin = store.load_chat(fork.chat_id).origin
        assert (origin.how, origin.num_start_messages, origin.estimated_tokens) == ("fork", 2, 12)
        assert math.isnan(origin.estimated_seconds)
        first = [m for m in store.load_chat(fork.chat_id).messages]
        assert [m.content for m in first] == ["one", "two"]


def test_a_file_without_the_table_reads_as_no_origin(tmp_path):
    with ChatStore(tmp_path) as store:
        full = store.create_chat()
        new = store.add_chat(Conversation(0, "t", False, messages=[Message("user", "x")],
                                          origin=ChatOrigin(full.chat_id, "trim", 1, 5, 0.1)))
    db = sqlite3.connect(tmp_path / "chats.sqlite3")
    db.execute("DROP TABLE chat_origins")  # as an llmchat before this table left the file
    db.commit()
    db.close()
    with ChatStore(tmp_path, readonly=True) as store:
        assert store.load_chat(new.chat_id).origin is None
    with ChatStore(tmp_path) as store:  # a writer adds the table back, empty
        assert store.load_chat(new.chat_id).origin is None
