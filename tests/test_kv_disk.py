"""The disk tier of the prefix cache: a restart reuses KV from disk with output identical to a cold run; bad
entries (bit flip, truncation, another model) are detected, recomputed and counted; a kill -9 mid-write leaves
whole entries or nothing; LRU eviction keeps the budget; the files are private."""
from __future__ import annotations

import dataclasses
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from llmchat.core.engine.block_manager import hash_block
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.api.events import Finished
from llmchat.core.kvdisk.entry import BadEntry, BlockKey, BlockLayout, decode_entry, encode_header
from llmchat.core.kvdisk.folder import entry_path, scan
from llmchat.core.kvdisk.store import KVDiskStore
from llmchat.core.api.params import SamplingParams
from llmchat.core.text.prompt import prompt_ids_for

GREEDY = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
SYSTEM = "You are a careful assistant. " * 12


def chat_prompt(loaded, messages: list[dict]) -> list[int]:
    return prompt_ids_for(loaded.tokenizer, messages)


def run(engine: LLMEngine, prompt_ids: list[int], params: SamplingParams = GREEDY) -> Finished:
    engine.add_request(prompt_ids, params)
    finished = None
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, Finished):
                finished = event
    engine.block_manager.check_invariants()
    assert finished is not None and finished.error is None
    return finished


def new_engine(loaded, disk_dir: Path | None, **kw) -> LLMEngine:
    config = EngineConfig(kv_cache_bytes=kw.pop("kv_cache_bytes", 4 << 20), kv_disk_bytes=kw.pop("kv_disk_bytes", 1 << 30)
                          if disk_dir else 0, kv_disk_dir=str(disk_dir) if disk_dir else None, **kw)
    return LLMEngine(loaded, config)


def cold(loaded, prompt_ids: list[int]) -> Finished:
    """The reference: no prefix cache, no disk tier."""
    return run(new_engine(loaded, None, enable_prefix_caching=False), prompt_ids)


def restart(engine: LLMEngine, loaded, disk_dir: Path) -> LLMEngine:
    """What quitting and starting again does to the engine: its writes land, its memory is gone."""
    engine.close()
    return new_engine(loaded, disk_dir)


def test_multi_turn_chat_after_restart_reuses_disk_and_matches_cold(tiny_model, tmp_path):
    disk = tmp_path / "kv"
    engine = new_engine(tiny_model, disk)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me about caches."}]
    ids = chat_prompt(tiny_model, messages)
    first = run(engine, ids)
    assert first.metrics.num_disk_tokens == 0
    for turn in range(2):  # each turn: restart, then the conversation goes on with its exact ids
        engine = restart(engine, tiny_model, disk)
        ids = ids + list(first.output_ids) + tiny_model.tokenizer.encode(f"<|im_start|>user\nAnd turn {turn}?<|im_end|>\n")
        reply = run(engine, ids)
        assert reply.output_ids == cold(tiny_model, ids).output_ids
        m = reply.metrics
        full_blocks_before = (len(ids) - len(first.output_ids) - 12) // 16  # at least the previous prompt's blocks
        assert m.num_disk_tokens >= full_blocks_before * 16 and m.num_disk_tokens == m.num_cached_tokens
        assert m.num_memory_tokens == 0 and m.num_prefilled_tokens == len(ids) - m.num_cached_tokens
        first = reply
    stats = engine.stats().disk
    assert stats is not None and stats.session.num_hits == engine.window.num_disk_tokens // 16
    engine.close()


def test_two_chats_sharing_a_system_prompt_store_it_once_and_match_cold(tiny_model, tmp_path):
    disk = tmp_path / "kv"
    engine = new_engine(tiny_model, disk)
    a = chat_prompt(tiny_model, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "First chat."}])
    b = chat_prompt(tiny_model, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Second one!"}])
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) // 16  # full blocks both share
    run(engine, a)
    engine.kv_disk.flush()
    num_entries = engine.stats().disk.num_entries
    run(engine, b)  # its shared blocks are memory hits; only its own blocks are new on disk
    engine = restart(engine, tiny_model, disk)
    assert scan(disk, clean_temp=False)[0].keys() and len(scan(disk, False)[0]) < 2 * num_entries
    for ids in (a, b):
        reply = run(engine, ids)
        assert reply.output_ids == cold(tiny_model, ids).output_ids
    engine.close()
    engine = new_engine(tiny_model, disk)
    reply_b = run(engine, b)
    assert reply_b.metrics.num_disk_tokens >= shared * 16
    engine.close()


def corrupt_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01
    path.write_bytes(bytes(data))


def corrupt_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage", ["flip", "truncate", "other_model", "old_layout"])
def test_a_bad_entry_is_detected_recomputed_counted_and_removed(tiny_model, tmp_path, damage):
    disk = tmp_path / "kv"
    ids = chat_prompt(tiny_model, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi there."}])
    engine = new_engine(tiny_model, disk)
    expected = run(engine, ids).output_ids
    engine.close()
    bm = engine.block_manager
    hashes = []
    for i in range(len(ids) // 16):
        hashes.append(hash_block(hashes[-1] if hashes else None, ids[i * 16 : (i + 1) * 16], bm.fingerprint))
    victim = entry_path(disk, hashes[2])  # the third block: two load, then the rest is computed
    assert victim.exists()
    if damage == "flip":
        corrupt_flip(victim)
    elif damage == "truncate":
        corrupt_truncate(victim)
    elif damage == "old_layout":  # a file from an older version of the format
        victim.write_bytes(victim.read_bytes().replace(b'"layout":1', b'"layout":0'))
    else:  # the same block written by an engine of another fingerprint (model or dtype)
        other = tmp_path / "other"
        other_engine = new_engine(tiny_model, other)
        other_engine.block_manager.fingerprint = b"another-model!!!"
        other_engine.kv_disk.store.layout = dataclasses.replace(other_engine.kv_disk.store.layout,
                                                                fingerprint=b"another-model!!!")
        run(other_engine, ids)
        other_engine.close()
        victim.write_bytes(entry_path(other, hash_block(None, ids[:16], b"another-model!!!")).read_bytes())
    engine = new_engine(tiny_model, disk)
    reply = run(engine, ids)
    assert reply.output_ids == expected
    assert reply.metrics.num_disk_tokens == 2 * 16, "the blocks before the bad one load; the rest is computed"
    assert engine.stats().disk.session.num_corrupt == 1
    engine.kv_disk.flush()
    assert victim.exists(), "the recomputed block is written again"
    decode_entry(victim.read_bytes(), BlockKey(hashes[2], hashes[1], tuple(ids[32:48])), engine.kv_disk.store.layout)
    engine.close()


def layout(nbytes: int = 4096) -> BlockLayout:
    return BlockLayout(b"f" * 16, "float32", (nbytes // 4,), nbytes)


def key(i: int) -> BlockKey:
    tokens = tuple(range(i, i + 16))
    return BlockKey(hash_block(None, tokens, b"f" * 16), None, tokens)


def test_entry_format_checks_every_field():
    lay = layout()
    payload = torch.arange(1024, dtype=torch.float32)
    data = encode_header(key(0), lay, memoryview(payload.numpy()).cast("B")) + payload.numpy().tobytes()
    assert bytes(decode_entry(data, key(0), lay)) == payload.numpy().tobytes()
    wrong = [
        (data, key(1), lay),  # another block
        (data, key(0), dataclasses.replace(lay, dtype="bfloat16")),
        (data, key(0), dataclasses.replace(lay, fingerprint=b"g" * 16)),
        (data, key(0), dataclasses.replace(lay, shape=(512, 2))),
        (data[:-1], key(0), lay),
        (data + b"x", key(0), lay),
        (b"garbage" * 10, key(0), lay),
        (data[:30], key(0), lay),
    ]
    for args in wrong:
        with pytest.raises(BadEntry):
            decode_entry(*args)


def test_lru_eviction_keeps_the_budget_and_the_recently_used(tmp_path):
    lay = layout()
    store = KVDiskStore(tmp_path / "kv", lay, budget_bytes=10 * 4500)
    for i in range(8):
        store.put(key(i), torch.full((1024,), float(i)))
    store.flush()
    time.sleep(0.01)
    store.touch(key(0).block_hash)  # used recently: survives
    for i in range(8, 14):
        store.put(key(i), torch.full((1024,), float(i)))
        store.flush()
    s = store.stats()
    assert s.num_bytes <= s.budget_bytes and s.session.num_evictions > 0
    assert store.read(key(0)) is not None and store.read(key(1)) is None and store.read(key(13)) is not None
    assert len(scan(tmp_path / "kv", False)[0]) == s.num_entries
    store.close()


def test_files_are_private(tmp_path):
    store = KVDiskStore(tmp_path / "kv", layout(), budget_bytes=1 << 20)
    store.put(key(0), torch.zeros(1024))
    store.close()
    assert stat.S_IMODE((tmp_path / "kv").stat().st_mode) == 0o700
    assert stat.S_IMODE(entry_path(tmp_path / "kv", key(0).block_hash).stat().st_mode) == 0o600


_WRITER = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from llmchat.core.engine.block_manager import hash_block
    from llmchat.core.kvdisk.entry import BlockKey, BlockLayout
    from llmchat.core.kvdisk.store import KVDiskStore
    n = 1 << 21  # 8 MB blocks: writes take long enough to be killed in the middle of one
    layout = BlockLayout(b"f" * 16, "float32", (n,), 4 * n)
    store = KVDiskStore(Path(sys.argv[1]), layout, budget_bytes=1 << 40)
    print("ready", flush=True)
    for i in range(10_000):
        tokens = tuple(range(i, i + 16))
        store.put(BlockKey(hash_block(None, tokens, b"f" * 16), None, tokens), torch.full((n,), float(i)))
        store.flush()
""")


@pytest.mark.slow  # a writer process killed mid-write, 10,000 entries
def test_kill_9_while_writing_leaves_whole_entries_or_nothing(tmp_path):
    root = tmp_path / "kv"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(root)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while len(scan(root, False)[0]) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.013)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(scan(root, False)[0]) >= 3
    n = 1 << 21
    lay = BlockLayout(b"f" * 16, "float32", (n,), 4 * n)
    store = KVDiskStore(root, lay, budget_bytes=1 << 40)  # opening cleans the dead writer's temp files
    assert not list(root.rglob("*.tmp"))
    index, _ = scan(root, False)
    by_hash = {key(i).block_hash: i for i in range(10_000)}
    for block_hash in index:
        i = by_hash[block_hash]
        payload = store.read(key(i))
        assert payload is not None, f"entry {i} does not verify"
        assert torch.frombuffer(payload, dtype=torch.float32)[::4096].eq(float(i)).all()
    assert store.stats().session.num_corrupt == 0
    store.close()


def test_a_live_processes_temp_file_is_left_alone(tmp_path):
    root = tmp_path / "kv"
    (root / "ab").mkdir(parents=True)
    live = root / "ab" / f"{'ab' * 16}.{os.getppid()}.0.tmp"  # our parent runs: its write may be in progress
    dead = root / "ab" / f"{'ab' * 16}.999999999.0.tmp"
    live.write_bytes(b"x")
    dead.write_bytes(b"x")
    store = KVDiskStore(root, layout(), budget_bytes=1 << 20)
    assert live.exists() and not dead.exists() and store.stats().session.num_temp_cleaned == 1
    store.close()


def run_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", *args], capture_output=True, text=True,
                          timeout=300, **kw)


@pytest.mark.slow
def test_ask_twice_reuses_the_system_prompt_from_disk(default_model_dir, tmp_path):
    # (conftest gives this test a cache dir of its own: the disk tier starts empty.) The second prompt's tail is
    # computed alone, on the int8 dots; with the many-rows GEMM off the whole first prompt is too, so the two
    # greedy replies are the same bits (with it on they may part after some tokens: kernels/quant_linear.py)
    env = dict(os.environ, LLMCHAT_QUANT_GEMM="off")
    system = "You are a patient teacher who explains computing ideas with short, concrete examples. " * 5
    ask = ("ask", "--system", system, "What is a cache? One sentence.", "--temperature", "0", "--max-tokens", "24",
           "--stats")
    first, second = run_cli(*ask, env=env), run_cli(*ask, env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout and "cach" in first.stdout.lower()
    assert "0 from disk" in first.stderr
    num_system_tokens = len(system) // 6  # the prompt is > 80 tokens: its full blocks are at least these
    line = next(ln for ln in second.stderr.splitlines() if ln.startswith("prompt "))
    num_prompt = int(line.split()[1])
    num_disk = int(line.split("cached in memory, ")[1].split()[0])
    assert num_disk == (num_prompt - 1) // 16 * 16 and num_disk >= num_system_tokens // 16 * 16, line
    report = run_cli("cache", env=env)
    assert report.returncode == 0 and "hits" in report.stdout and " 0 blocks" not in report.stdout, report.stdout
    cleared = run_cli("cache", "--clear", env=env)
    assert cleared.returncode == 0 and "removed" in cleared.stdout
    assert " 0 blocks" in run_cli("cache", env=env).stdout
    bad = run_cli("ask", "hi", "--kv-disk-gb", "-1", env=env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--kv-disk-gb" in bad.stderr
