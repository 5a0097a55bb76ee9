"""`llmchat import`: an exported chat comes back whole (JSON: its exact token ids, so the next turn's prompt
and cached tokens equal the original's), Markdown as text only, and a bad file is one line with nothing stored."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmchat.core.bench.bench import chat_turn
from llmchat.core.chats.exchange import ChatImportError, conversation_from_json, conversation_from_markdown
from llmchat.core.config import EngineConfig
from llmchat.core.chats.conversation import ChatSettings, Conversation, Message
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.chats.store import ChatStore
from llmchat.tui.commands import cli
from llmchat.tui.commands.export import chat_dict, chat_json, chat_markdown


def engine_for(tiny_model) -> LLMEngine:
    return LLMEngine(tiny_model, EngineConfig(max_num_seqs=4, kv_cache_bytes=4 << 20, kv_disk_bytes=0))


def one_turn_chat(tiny_model, store: ChatStore) -> tuple[LLMEngine, Conversation]:
    """A stored chat with one finished turn, run on its own engine (whose prefix cache now holds its ids)."""
    engine = engine_for(tiny_model)
    chat = store.create_chat(ChatSettings("You are terse.", 0.0, 1.0, 12))
    chat_turn(engine, chat, "What is a paged KV cache? Explain it in a few sentences, please.", 12)
    store.add_messages(chat, *chat.messages)
    store.finish_turn(chat, *chat.messages[-2:])
    return engine, store.load_chat(chat.chat_id)


def test_a_json_export_comes_back_whole_and_its_next_turn_reuses_the_cache_like_the_original(tiny_model, tmp_path):
    with ChatStore(tmp_path / "a") as store:
        engine_a, original = one_turn_chat(tiny_model, store)
    export = tmp_path / "chat.json"
    export.write_text(chat_json(original), encoding="utf-8")

    assert cli.main(["import", str(export), "--data-dir", str(tmp_path / "b")]) == 0
    with ChatStore(tmp_path / "b") as store:
        (summary,) = store.list_chats()
        imported = store.load_chat(summary.chat_id)
    assert imported.token_ids == original.token_ids and len(original.token_ids) > 16
    assert [(m.role, m.content, m.status, m.token_span, m.metrics) for m in imported.messages] == \
        [(m.role, m.content, m.status, m.token_span, m.metrics) for m in original.messages]
    assert (imported.title, imported.settings, imported.created_at) == \
        (original.title, original.settings, original.created_at)
    assert chat_dict(imported) == {**chat_dict(original), "chat_id": imported.chat_id}

    # The next turn: the original on its engine, the import on an engine that ran the same first turn.
    with ChatStore(tmp_path / "c") as store:
        engine_b, replay = one_turn_chat(tiny_model, store)
    assert replay.token_ids == original.token_ids  # (deterministic: the two engines hold the same blocks)
    next_a = chat_turn(engine_a, original, "And why blocks of 16 tokens?", 4)
    next_b = chat_turn(engine_b, imported, "And why blocks of 16 tokens?", 4)
    assert imported.messages[-2].token_span == original.messages[-2].token_span  # the same prompt ids, extended
    assert imported.messages[-2].token_span[0] == len(replay.token_ids)  # (not re-tokenized)
    assert imported.token_ids == original.token_ids
    assert next_b.metrics.num_prompt_tokens == next_a.metrics.num_prompt_tokens
    assert next_b.metrics.num_cached_tokens == next_a.metrics.num_cached_tokens > 0


def test_a_markdown_export_comes_back_as_text(tiny_model, tmp_path):
    with ChatStore(tmp_path / "a") as store:
        _, original = one_turn_chat(tiny_model, store)
    export = tmp_path / "chat.md"
    export.write_text(chat_markdown(original) + "\n", encoding="utf-8")
    assert cli.main(["import", str(export), "--data-dir", str(tmp_path / "b")]) == 0
    with ChatStore(tmp_path / "b") as store:
        (summary,) = store.list_chats()
        imported = store.load_chat(summary.chat_id)
    assert imported.token_ids == [] and imported.title == original.title
    assert imported.settings == original.settings
    assert [(m.role, m.content.strip()) for m in imported.messages] == \
        [(m.role, m.content.strip()) for m in original.messages]


def test_markdown_round_trips_ordinary_text_exactly():
    original = Conversation(7, "Caches", False, settings=ChatSettings("Be brief.\nAnd kind.", 0.2, 0.95, 300))
    original.messages = [Message("user", "What is KV?\n\n```py\nx = 1\n```"),
                         Message("assistant", "Keys and values.\n\n- one\n- *two*", metrics=None),
                         Message("user", "Thanks")]
    imported = conversation_from_markdown(chat_markdown(original) + "\n")
    assert (imported.title, imported.settings, imported.token_ids) == ("Caches", original.settings, [])
    assert [(m.role, m.content) for m in imported.messages] == [(m.role, m.content) for m in original.messages]


def test_markdown_notes_and_settings_are_parsed():
    text = ("# Title here\n\nChat #4 · created x  \ntemperature 0.3 · top-p 0.8 · max tokens 2,048 · 10 tokens\n\n"
            "## System\n\nBe kind.\n\n## User\n\nline one\n\nline two\n\n## Assistant\n\nan answer\n*not a note*\n\n"
            "*TTFT 12 ms · 3 tokens*\n\n## User\n\nagain\n")
    c = conversation_from_markdown(text)
    assert c.title == "Title here" and c.settings == ChatSettings("Be kind.", 0.3, 0.8, 2048)
    assert [(m.role, m.content) for m in c.messages] == [
        ("user", "line one\n\nline two"), ("assistant", "an answer\n*not a note*"), ("user", "again")]


GOOD = {"title": "t", "created_at": 1.0, "updated_at": 2.0,
        "settings": {"system_prompt": None, "temperature": 0.7, "top_p": 1.0, "max_tokens": 5},
        "token_ids": [1, 2, 3], "messages": [{"role": "user", "content": "hi", "status": "done",
                                              "finish_reason": None, "error": None, "created_at": 1.0,
                                              "metrics": None, "token_span": [0, 3]}]}


def broken(path: str, value) -> str:
    d = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    target = d
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    target[int(last) if last.isdigit() else last] = value
    return json.dumps(d)


@pytest.mark.parametrize("text, expected", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not an llmchat JSON export"),
    (broken("title", ""), "title must be a non-empty string"),
    (broken("token_ids.1", -4), "token_ids[1] must be a token id"),
    (broken("token_ids.1", 2.5), "token_ids[1] must be a token id"),
    (broken("messages.0.role", "system"), "messages[0].role must be 'user' or 'assistant'"),
    (broken("messages.0.content", None), "messages[0].content must be a string"),
    (broken("messages.0.status", "weird"), "messages[0].status must be done or"),
    (broken("messages.0.token_span", [0, 9]), "messages[0].token_span must be [start, end] within the 3"),
    (broken("messages.0.metrics", {"no_such_field": 1}), "messages[0].metrics is not llmchat's"),
    (broken("settings.top_p", 0), "settings.top_p must be a number in (0, 1]"),
    (broken("settings.max_tokens", True), "settings.max_tokens must be a positive integer"),
])
def test_a_bad_json_file_is_one_line(text, expected):
    with pytest.raises(ChatImportError) as e:
        conversation_from_json(text)
    assert expected in str(e.value) and "\n" not in str(e.value)
    assert conversation_from_json(json.dumps(GOOD)).token_ids == [1, 2, 3]


def test_a_bad_file_through_the_cli_is_one_line_exit_2_and_nothing_stored(tmp_path):
    data = tmp_path / "data"
    with ChatStore(data) as store:  # a store with one chat already
        store.create_chat()
    bad = tmp_path / "bad.json"
    bad.write_text(broken("messages", [GOOD["messages"][0], {"role": "user", "content": 3}]))
    done = subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", "import", str(bad), "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "messages[1].content must be a string" in err[0] and "nothing imported" in err[0]
    (bad := tmp_path / "notes.md").write_text("just some notes\n")
    assert cli.main(["import", str(bad), "--data-dir", str(data)]) == 2
    with ChatStore(data) as store:
        assert len(store.list_chats()) == 1


def test_the_store_imports_in_one_transaction(tmp_path):
    record = conversation_from_json(json.dumps(GOOD))
    record.messages.append(dataclasses.replace(record.messages[0], role="nobody"))  # fails the store's check
    with ChatStore(tmp_path) as store:
        with pytest.raises(AssertionError):
            store.import_chat(record)
        assert store.list_chats() == []  # the chat row went with the failed message
        record.messages.pop()
        chat = store.import_chat(record)
        assert chat.token_ids == [1, 2, 3] and chat.messages[0].token_span == (0, 3) and not chat.title_auto


def test_a_data_dir_in_use_is_one_line(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(GOOD))
    with ChatStore(tmp_path / "d"):
        assert cli.main(["import", str(path), "--data-dir", str(tmp_path / "d")]) == 2
    assert "in use by another llmchat" in capsys.readouterr().err
    assert Path(tmp_path / "d").is_dir()
