"""core/chats/search.py: the FTS5 index follows every write to messages (in the same transaction), older
files get it on open, user text is never FTS5 syntax, and without FTS5 a LIKE scan answers the same."""
from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from llmchat.core.chats import search as chat_search
from llmchat.core.chats.conversation import Message
from llmchat.core.chats.store import ChatStore

FIXTURES = Path(__file__).parent / "fixtures"


def found(store: ChatStore, text: str) -> set[tuple[int, int]]:
    """(chat id, message id) of every hit."""
    return {(h.chat_id, h.message_id) for h in store.search_messages(text)}


def assert_index_in_step(store: ChatStore) -> None:
    """FTS5's own check of an external-content index against its content table (raises if they differ)."""
    store._db.execute(f"INSERT INTO {chat_search.FTS_TABLE} ({chat_search.FTS_TABLE}, rank) VALUES ('integrity-check', 1)")


def say(store: ChatStore, chat, text: str) -> tuple[Message, Message]:
    assert chat.store is store  # (start_turn stores both messages itself)
    return chat.start_turn(text)


def test_the_index_follows_inserts_edits_and_deletes(tmp_path):
    with ChatStore(tmp_path) as store:
        assert store.search_uses_fts
        a, b = store.create_chat(), store.create_chat()
        user, reply = say(store, a, "How do I boil an egg?")
        say(store, b, "Tell me about volcanoes")
        assert found(store, "egg") == {(a.chat_id, user.message_id)}
        assert found(store, "VOLCANO") == {(b.chat_id, b.messages[0].message_id)}  # any case, word prefix
        assert found(store, "boil volcanoes") == set()  # every term, in one message

        answer = "Put the egg in simmering water for seven minutes."
        a.begin_reply(user, reply, [1, 2, 3])
        a.extend_reply(reply, [4], "Put the egg")  # streaming: the text so far is searchable
        assert found(store, "egg") == {(a.chat_id, user.message_id), (a.chat_id, reply.message_id)}
        a.finish_reply(reply, answer, "done", "stop")
        assert found(store, "simmering") == {(a.chat_id, reply.message_id)}
        assert_index_in_step(store)

        a.cut_at(reply)  # an edit/undo cuts the chat
        assert found(store, "simmering") == set()
        fork = b.branch(b.messages[0])  # a fork copies the messages
        assert found(store, "volcanoes") == {(b.chat_id, b.messages[0].message_id),
                                             (fork.chat_id, fork.messages[0].message_id)}
        store.delete_chat(b.chat_id)  # its messages go by ON DELETE CASCADE: the trigger still fires
        assert found(store, "volcanoes") == {(fork.chat_id, fork.messages[0].message_id)}
        fork.cut_at(fork.messages[0])
        assert found(store, "volcanoes") == set()
        assert_index_in_step(store)


def test_a_write_that_rolls_back_leaves_the_index_as_it_was(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        say(store, chat, "kept message")
        with pytest.raises(RuntimeError):
            with store.batch():
                say(store, chat, "rolled back message")
                raise RuntimeError("disk full, say")
        assert [h.message_id for h in store.search_messages("message")] == [chat.messages[0].message_id]
        assert_index_in_step(store)


@pytest.mark.parametrize("text", ['"', 'a"b', "NEAR(", "(x", "AND", "x OR", "*", "-", "^", "col:umn", "'", "\\"])
def test_fts5_syntax_in_a_query_is_searched_as_text(tmp_path, text):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        user, _ = say(store, chat, 'say "quoted" AND (parens) x OR y')
        store.search_messages(text)  # no error, whatever it finds
        assert found(store, '"quoted"') == {(chat.chat_id, user.message_id)}
        assert found(store, "AND (parens") == {(chat.chat_id, user.message_id)}
        assert store.search_messages("   ") == []


def test_hits_carry_the_chat_title_and_a_marked_snippet(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        long_text = " ".join(f"word{i}" for i in range(60)) + " needle " + " ".join(f"tail{i}" for i in range(60))
        say(store, chat, long_text)
        (hit,) = store.search_messages("needle")
        assert hit.chat_title == store.load_chat(chat.chat_id).title and hit.role == "user"
        assert [t for t, is_match in hit.snippet if is_match] == ["needle"]
        text = "".join(t for t, _ in hit.snippet)
        assert text.startswith("…") and text.endswith("…") and "word59" in text and "tail0" in text
        assert len(text.split()) <= chat_search.SNIPPET_NUM_TOKENS + 2


def test_a_file_of_schema_1_gets_a_filled_index_on_open(tmp_path):
    shutil.copytree(FIXTURES / "v1_data", tmp_path / "data")
    with ChatStore(tmp_path / "data") as store:
        hits = store.search_messages("paris")
        assert [(h.chat_title, h.role) for h in hits] == [("What is the capital of France?", "assistant")]
        assert "".join(t for t, _ in hits[0].snippet) == "The capital of France is Paris."
        assert found(store, "rome") and found(store, "second line")
        assert_index_in_step(store)


def test_a_file_without_the_index_gets_it_filled_on_open(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        user, _ = say(store, chat, "written before search existed")
    db = sqlite3.connect(tmp_path / "chats.sqlite3")  # as llmchat wrote it before the index: no table, no triggers
    for trigger in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
        db.execute(f"DROP TRIGGER {trigger}")
    db.execute(f"DROP TABLE {chat_search.FTS_TABLE}")
    db.execute("DELETE FROM meta WHERE key = ?", (chat_search.INDEX_KEY,))
    db.commit()
    db.close()
    with ChatStore(tmp_path) as store:
        assert found(store, "before search") == {(chat.chat_id, user.message_id)}
        assert_index_in_step(store)
    with ChatStore(tmp_path, readonly=True) as store:  # `llmchat export` and friends read it too
        assert store.search_uses_fts and found(store, "existed") == {(chat.chat_id, user.message_id)}


def test_without_fts5_search_scans_and_a_later_open_with_fts5_rebuilds(tmp_path, monkeypatch):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        first, _ = say(store, chat, "indexed while FTS5 was there")
    monkeypatch.setattr(chat_search, "fts5_available", lambda db: False)
    with ChatStore(tmp_path) as store:
        assert not store.search_uses_fts
        triggers = store._db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
        assert triggers == []  # an sqlite3 without FTS5 could not run them
        chat = store.load_chat(chat.chat_id)  # (as the app after a restart)
        second, _ = say(store, chat, "written without FTS5, 100% plain_text")
        assert found(store, "indexed") == {(chat.chat_id, first.message_id)}
        assert found(store, "WITHOUT fts5") == {(chat.chat_id, second.message_id)}
        assert found(store, "100%") == {(chat.chat_id, second.message_id)}
        assert found(store, "0%p") == set() and found(store, "n_t") == {(chat.chat_id, second.message_id)}
        assert found(store, "_") == {(chat.chat_id, second.message_id)}  # LIKE wildcards are escaped
        (hit,) = store.search_messages("plain")
        assert [t for t, is_match in hit.snippet if is_match] == ["plain"]
    monkeypatch.undo()
    with ChatStore(tmp_path) as store:  # FTS5 again: the rows written meanwhile are indexed
        assert store.search_uses_fts
        assert found(store, "without") == {(chat.chat_id, second.message_id)}
        assert_index_in_step(store)


def test_fts5_and_the_like_scan_agree_with_a_plain_scan_on_random_chats(tmp_path, monkeypatch):
    """The index (fast path) and the LIKE scan (fallback) against a Python scan, over random writes."""
    rng = random.Random(15)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    queries = ["alp", "alpha", "bra", "charlie", "delta echo", "fox", "golf hotel", "Hotel", "zulu"]
    with ChatStore(tmp_path) as store:
        chats = [store.create_chat() for _ in range(3)]
        for _ in range(60):
            chat = rng.choice(chats)
            op = rng.random()
            if op < 0.6 or not chat.messages:
                user, reply = say(store, chat, " ".join(rng.choices(words, k=rng.randrange(1, 6))))
                chat.begin_reply(user, reply, [1])
                chat.extend_reply(reply, [2], " ".join(rng.choices(words, k=rng.randrange(0, 6))))
            elif op < 0.8:
                chat.cut_at(rng.choice(chat.messages))
            else:
                reply = next((m for m in reversed(chat.messages) if m.role == "assistant"), None)
                if reply is not None and reply.token_span is not None:
                    chat.extend_reply(reply, [3], " ".join(rng.choices(words, k=rng.randrange(0, 6))))
        assert_index_in_step(store)
        for text in queries:
            terms = text.casefold().split()
            expected = {(c.chat_id, m.message_id) for c in chats for m in c.messages
                        if all(any(w.startswith(t) for w in m.content.casefold().split()) for t in terms)}
            fts = {(h.chat_id, h.message_id) for h in chat_search.search(store._db, text, use_fts=True, limit=999)}
            like = {(h.chat_id, h.message_id) for h in chat_search.search(store._db, text, use_fts=False, limit=999)}
            assert fts == expected == like, text


def test_split_marked_and_like_snippet():
    m0, m1 = chat_search.MATCH_START, chat_search.MATCH_END
    assert chat_search.split_marked(f"…the {m0}egg{m1} and {m0}eggs{m1}") == (
        ("…the ", False), ("egg", True), (" and ", False), ("eggs", True))
    assert chat_search.split_marked("no match") == (("no match", False),)
    assert chat_search.like_snippet("Short EGG text", ["egg"]) == (("Short ", False), ("EGG", True), (" text", False))
    parts = chat_search.like_snippet("x" * 100 + "needle" + "y" * 100, ["needle"], context=5)
    assert parts == (("…xxxxx", False), ("needle", True), ("yyyyy…", False))
    parts = chat_search.like_snippet("a" * 50 + "one " + "b" * 10 + " two" + "c" * 50, ["two", "one"], context=10)
    assert parts == (("…" + "a" * 10, False), ("one", True), (" " + "b" * 10 + " ", False), ("two", True),
                     ("c" * 10 + "…", False))  # from before the first term to after the last one
