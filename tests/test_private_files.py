"""Chats are private whatever the umask: data dir 0700; database, WAL, SHM and lock 0600; exports 0600 unless the
user's own file already had a mode; the CLI never leaves group- or world-writable files (the model cache)."""
from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from llmchat.core.chats.conversation import Message
from llmchat.core.chats.store import DB_NAME, ChatStore
from llmchat.tui.commands.export import export_chat, run_export


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextmanager
def umask(value: int):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def a_chat(store: ChatStore):
    record = store.create_chat()
    store.add_messages(record, Message(role="user", content="my secret"))
    return store.load_chat(record.chat_id)


def test_a_new_data_dir_and_its_database_are_private_even_with_umask_0(tmp_path):
    data = tmp_path / "deep" / "data"
    with umask(0), ChatStore(data) as store:
        a_chat(store)
        assert mode(data) == 0o700
        for name in (DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", "llmchat.lock"):
            assert (data / name).exists(), name
            assert mode(data / name) == 0o600, name


def test_an_older_world_readable_data_dir_is_tightened_on_open(tmp_path):
    data = tmp_path / "data"
    with ChatStore(data) as store:
        a_chat(store)
    for path in (data, *data.iterdir()):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    with ChatStore(data) as store:
        assert len(store.list_chats()) == 1
        assert mode(data) == 0o700
        assert {p.name: mode(p) for p in data.iterdir()} == {p.name: 0o600 for p in data.iterdir()}


def test_a_named_folder_without_chats_keeps_its_mode(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    os.chmod(folder, 0o750)
    with ChatStore(folder):
        pass
    assert mode(folder) == 0o750
    assert mode(folder / DB_NAME) == 0o600


def test_exports_are_private_and_an_existing_file_keeps_its_mode(tmp_path):
    data = tmp_path / "data"
    with umask(0):
        with ChatStore(data) as store:
            record = a_chat(store)
        md, js = export_chat(record, data / "exports")
        assert mode(data / "exports") == 0o700 and mode(md) == 0o600 and mode(js) == 0o600
        assert "my secret" in md.read_text()
        out = tmp_path / "out.md"
        args = argparse.Namespace(data_dir=str(data), chat_id=record.chat_id, format="markdown", output=str(out))
        assert run_export(args) == 0
        assert mode(out) == 0o600 and "my secret" in out.read_text()
        os.chmod(out, 0o644)  # the user's own choice for their file
        assert run_export(args) == 0
        assert mode(out) == 0o644


def test_the_cli_never_creates_group_or_world_writable_files(tmp_path):
    code = ("import os; os.umask(0); from llmchat.tui.commands.cli import main; main(['config']); "
            "print(oct(os.umask(0)))")
    env = {**os.environ, "LLMCHAT_DATA_DIR": str(tmp_path / "d"), "LLMCHAT_CACHE_DIR": str(tmp_path / "c"),
           "LLMCHAT_CONFIG": str(tmp_path / "config.toml")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0o22"
