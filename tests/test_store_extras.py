"""core/chats/extras.py: a chat's top-k, seed, stop strings and model id survive a reopen, follow a fork and an
import, go with the chat, and a file without their table (an older llmchat's) reads as defaults."""
from __future__ import annotations

import sqlite3

from llmchat.core.chats.exchange import conversation_from_json
from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.chats.store import ChatStore
from llmchat.tui.commands.export import chat_json

SETTINGS = ChatSettings("Be brief.", 0.8, 0.9, 64, top_k=40, seed=2**63 - 1, stop=("User:", "\n\n"))


def test_extra_settings_and_model_survive_a_reopen_a_fork_and_an_import(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat(SETTINGS)
        chat.adopt_model("model-a")
        chat.update_settings(SETTINGS)  # (settings do not touch the model)
        plain = store.create_chat()
    with ChatStore(tmp_path) as store:
        loaded = store.load_chat(chat.chat_id)
        assert loaded.settings == SETTINGS and loaded.model_id == "model-a"
        assert store.load_chat(plain.chat_id).settings == ChatSettings() and store.load_chat(plain.chat_id).model_id is None
        user, reply = loaded.start_turn("hi")
        fork = loaded.branch(user)
        assert fork.settings == SETTINGS and fork.model_id == "model-a"
        imported = store.add_chat(conversation_from_json(chat_json(loaded)))
        assert imported.settings == SETTINGS and imported.model_id == "model-a"
        loaded.update_settings(ChatSettings())
        assert store.load_chat(chat.chat_id).settings == ChatSettings()
        store.delete_chat(chat.chat_id)
        left = store._db.execute("SELECT chat_id FROM chat_extras ORDER BY chat_id").fetchall()
        assert [r[0] for r in left] == [plain.chat_id, fork.chat_id, imported.chat_id]


def test_a_file_without_the_table_reads_as_defaults_read_only_too(tmp_path):
    with ChatStore(tmp_path) as store:
        chat = store.create_chat(ChatSettings(None, 0.2, 0.9, 30))
    db = sqlite3.connect(tmp_path / "chats.sqlite3")
    db.execute("DROP TABLE chat_extras")  # as an llmchat before this table left the file
    db.commit()
    db.close()
    with ChatStore(tmp_path, readonly=True) as store:  # `llmchat export` reads it without writing
        assert store.load_chat(chat.chat_id).settings == ChatSettings(None, 0.2, 0.9, 30)
    with ChatStore(tmp_path) as store:  # a writer adds the table; the chat keeps its settings
        assert store.load_chat(chat.chat_id).settings == ChatSettings(None, 0.2, 0.9, 30)
        store.update_settings(chat.chat_id, SETTINGS)
    with ChatStore(tmp_path) as store:
        assert store.load_chat(chat.chat_id).settings == SETTINGS
