"""The disk tier under faults (issue 26, item 8): a full or read-only disk, an I/O error, an entry deleted or cut
short while it is read, two processes writing the same blocks, a slow disk. Each time the reply is the one
computed without the tier, one notice is logged, nothing damaged stays on disk and the budget holds."""
from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import torch

from llmchat.core.engine.block_manager import hash_block
from llmchat.core.kvdisk import store as store_module, tier as tier_module
from llmchat.core.kvdisk.entry import BlockKey, BlockLayout, decode_entry
from llmchat.core.kvdisk.folder import ENTRY_SUFFIX, TEMP_SUFFIX, entry_path
from llmchat.core.kvdisk.store import KVDiskStore

from test_kv_disk import GREEDY, SYSTEM, chat_prompt, cold, new_engine, run

PROMPT_MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello there"}]


def notices(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "disk" in r.getMessage()]


def populate(loaded, root: Path, prompt: list[int]):
    engine = new_engine(loaded, root)
    first = run(engine, prompt)
    engine.close()
    return first


@pytest.mark.parametrize("code", ["ENOSPC", "EROFS", "EIO"])
def test_a_writer_that_fails_costs_the_tier_once_never_the_reply(tiny_model, tmp_path, caplog, code):
    prompt = chat_prompt(tiny_model, PROMPT_MESSAGES)
    expected = cold(tiny_model, prompt).output_ids
    engine = new_engine(tiny_model, tmp_path)
    err = OSError(getattr(errno, code), os.strerror(getattr(errno, code)))
    with caplog.at_level(logging.WARNING), mock.patch.object(engine.kv_disk.store, "_write", side_effect=err):
        replies = [run(engine, prompt).output_ids, run(engine, prompt + [100, 101, 102] * 12).output_ids]
        engine.kv_disk.flush()
    assert replies[0] == expected
    said = notices(caplog)
    assert len(said) == 1 and os.strerror(getattr(errno, code)) in said[0], said
    assert engine.kv_disk.store.stats().session.num_writes == 0
    assert not list(tmp_path.rglob(f"*{ENTRY_SUFFIX}")) and not list(tmp_path.rglob(f"*{TEMP_SUFFIX}"))


def test_a_cache_folder_that_cannot_be_opened_leaves_the_engine_without_the_tier(tiny_model, tmp_path, caplog):
    prompt = chat_prompt(tiny_model, PROMPT_MESSAGES)
    ro = OSError(errno.EROFS, os.strerror(errno.EROFS))
    with caplog.at_level(logging.WARNING), mock.patch.object(store_module, "make_private_dir", side_effect=ro):
        engine = new_engine(tiny_model, tmp_path / "kv")
    assert engine.kv_disk is None and len(notices(caplog)) == 1
    assert run(engine, prompt).output_ids == cold(tiny_model, prompt).output_ids


class CutShortWhileRead:
    """open() for the store: the entry is truncated (or deleted) after its size is read, before its bytes."""

    def __init__(self, how: str):
        self.how = how
        self.num_damaged = 0

    def __call__(self, path, mode="r", *a, **kw):
        f = open(path, mode, *a, **kw)
        outer = self
        if str(path).endswith(ENTRY_SUFFIX) and self.num_damaged == 0:
            real_readinto = f.readinto

            class Damaged:
                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    f.close()

                def fileno(self):
                    return f.fileno()

                def readinto(self, buf):
                    outer.num_damaged += 1
                    if outer.how == "truncate":
                        os.truncate(path, 100)
                    else:
                        os.unlink(path)  # the open file still reads whole: POSIX keeps it until closed
                    return real_readinto(buf)
            return Damaged()
        return f


@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_an_entry_damaged_while_it_is_read_is_recomputed_and_removed(tiny_model, tmp_path, caplog, how):
    prompt = chat_prompt(tiny_model, PROMPT_MESSAGES)
    expected = populate(tiny_model, tmp_path, prompt).output_ids
    engine = new_engine(tiny_model, tmp_path)
    damage = CutShortWhileRead(how)
    with caplog.at_level(logging.WARNING), mock.patch.object(store_module, "open", damage, create=True):
        again = run(engine, prompt)
    assert damage.num_damaged == 1 and again.output_ids == expected
    if how == "truncate":
        assert len(notices(caplog)) == 1 and engine.kv_disk.store.counters.num_corrupt == 1
    engine.kv_disk.flush()
    assert_entries_verify(engine, tmp_path)


def assert_entries_verify(engine, root: Path) -> None:
    """Every entry on disk decodes (header, checksum) and the budget holds; no temp file."""
    store = engine.kv_disk.store
    assert not list(root.rglob(f"*{TEMP_SUFFIX}"))
    files = list(root.rglob(f"*{ENTRY_SUFFIX}"))
    assert files and sum(p.stat().st_size for p in files) <= store.budget_bytes
    engine.close()
    reopened = new_engine(engine.loaded, root)
    assert reopened.kv_disk.store.stats().num_bytes == sum(p.stat().st_size for p in files)
    for path in files:
        assert path.stat().st_size > store.layout.nbytes, f"{path.name} was left damaged"


def test_a_slow_disk_is_left_for_computing_after_one_slow_read(tiny_model, tmp_path, caplog):
    prompt = chat_prompt(tiny_model, PROMPT_MESSAGES)
    expected = populate(tiny_model, tmp_path, prompt).output_ids
    engine = new_engine(tiny_model, tmp_path)
    real_read, reads = engine.kv_disk.store.read, []

    def slow_read(key):
        reads.append(key)
        time.sleep(0.2)
        return real_read(key)
    with caplog.at_level(logging.WARNING), mock.patch.object(tier_module, "SLOW_READ_S", 0.1), \
            mock.patch.object(engine.kv_disk.store, "read", slow_read):
        first, second = run(engine, prompt), run(engine, prompt + [7, 8, 9])
    assert first.output_ids == expected and len(reads) == 1, "one slow read, then the prompt is computed"
    assert first.metrics.num_disk_tokens == 16
    assert len(notices(caplog)) == 1 and "slow" in notices(caplog)[0]


WRITER = """
import sys, torch
from pathlib import Path
from llmchat.core.kvdisk.entry import BlockKey, BlockLayout
from llmchat.core.kvdisk.store import KVDiskStore
from llmchat.core.engine.block_manager import hash_block
layout = BlockLayout(b"f" * 16, "float32", (64,), 256)
store = KVDiskStore(Path(sys.argv[1]), layout, 40 * 400)
for i in range(60):
    store.put(BlockKey(hash_block(None, (i,), layout.fingerprint), None, (i,)), torch.full((64,), float(i)))
store.close()
"""


def test_two_processes_writing_the_same_blocks_leave_whole_entries_within_budget(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    layout = BlockLayout(b"f" * 16, "float32", (64,), 256)
    store = KVDiskStore(tmp_path, layout, 40 * 400)
    assert not list(tmp_path.rglob(f"*{TEMP_SUFFIX}"))
    files = list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))
    assert files and sum(p.stat().st_size for p in files) <= store.budget_bytes
    num_whole = 0
    for i in range(60):
        key = BlockKey(hash_block(None, (i,), layout.fingerprint), None, (i,))
        if entry_path(tmp_path, key.block_hash).exists():
            payload = decode_entry(bytearray(entry_path(tmp_path, key.block_hash).read_bytes()), key, layout)
            assert torch.equal(torch.frombuffer(payload, dtype=torch.float32), torch.full((64,), float(i)))
            num_whole += 1
    assert num_whole == len(files)
    store.close()
