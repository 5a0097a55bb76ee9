"""Disk reads off the engine step (core/kvdisk/prefetch.py, issue 27 item 2): a submitted turn's disk hits are
read on the loader thread while the other chats keep decoding, its reply is the one the chat gets in memory,
a bad entry is computed, a cancelled turn's reads are dropped, and a chat warmed on focus fills in block by
block. Real engine, real tier; only the store's read is wrapped (a gate, a thread probe, a damage)."""
from __future__ import annotations

import gc
import threading
import weakref
from unittest import mock

import torch

from llmchat.core.api.events import Finished, Started, TextDelta
from llmchat.core.api.params import SamplingParams
from llmchat.core.api.events import FinishReason
from llmchat.core.kvdisk import tier as tier_module
from llmchat.core.kvdisk.folder import entry_path

from test_kv_disk import GREEDY, SYSTEM, chat_prompt, new_engine, run

GATE_TIMEOUT_S = 30.0


class GatedRead:
    """Stands in for store.read: records the thread of every read and holds each one until `allow` lets it go."""

    def __init__(self, store, num_allowed: int = 0):
        self.real, self.threads, self.keys = store.read, [], []
        self.allowed = threading.Semaphore(num_allowed)

    def __call__(self, key):
        self.threads.append(threading.get_ident())
        self.keys.append(key)
        assert self.allowed.acquire(timeout=GATE_TIMEOUT_S), "a read was held past the test"
        return self.real(key)

    def allow(self, n: int = 1_000_000) -> None:
        for _ in range(n):
            self.allowed.release()


def chat(loaded, text: str = "Tell me about caches.") -> list[int]:
    return chat_prompt(loaded, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}])


def populated(loaded, root, prompt_ids):
    """An engine whose chat left its blocks on disk; returns (its reply, the next turn's prompt)."""
    engine = new_engine(loaded, root)
    first = run(engine, prompt_ids)
    engine.close()
    follow_up = prompt_ids + list(first.output_ids) + loaded.tokenizer.encode("<|im_start|>user\nAnd then?<|im_end|>\n")
    return first, follow_up


def events_of(engine, request_id: int, events) -> list:
    return [e for e in events if e.request_id == request_id]


def test_a_turns_disk_reads_run_on_the_loader_thread_and_give_the_in_memory_reply(tiny_model, tmp_path):
    ids = chat(tiny_model)
    _, follow_up = populated(tiny_model, tmp_path, ids)
    in_memory = new_engine(tiny_model, None)  # the chat never left memory: its blocks computed, then reused
    run(in_memory, ids)
    expected = run(in_memory, follow_up)
    assert expected.metrics.num_cached_tokens >= len(ids) // 16 * 16

    engine = new_engine(tiny_model, tmp_path)  # the app restarted
    probe = GatedRead(engine.kv_disk.store, num_allowed=1_000)
    with mock.patch.object(engine.kv_disk.store, "read", probe):
        reply = run(engine, follow_up)
    assert probe.threads and threading.get_ident() not in probe.threads, "no disk read on the engine thread"
    assert reply.metrics.num_disk_tokens == len(probe.keys) * 16 >= len(ids) // 16 * 16
    assert reply.output_ids == expected.output_ids
    for h in (k.block_hash for k in probe.keys):  # the KV read back is bit for bit the KV computed in memory
        a, b = in_memory.block_manager.hash_to_block[h], engine.block_manager.hash_to_block[h]
        for layer in range(len(engine.kv_cache.k)):
            assert torch.equal(in_memory.kv_cache.k[layer][a], engine.kv_cache.k[layer][b])
            assert torch.equal(in_memory.kv_cache.v[layer][a], engine.kv_cache.v[layer][b])
    assert reply.explanation.disk == "hit"


def test_a_running_reply_keeps_decoding_while_a_new_turns_disk_read_is_held(tiny_model, tmp_path):
    ids = chat(tiny_model)
    _, follow_up = populated(tiny_model, tmp_path, ids)
    expected = run(new_engine(tiny_model, tmp_path), follow_up)
    engine = new_engine(tiny_model, tmp_path)
    other_prompt = chat_prompt(tiny_model, [{"role": "user", "content": "Another chat, nothing on disk."}])
    other = engine.add_request(other_prompt, SamplingParams(
        temperature=0, max_tokens=40, ignore_eos=True))
    for _ in range(3):
        engine.step()
    gate = GatedRead(engine.kv_disk.store)
    with mock.patch.object(engine.kv_disk.store, "read", gate), mock.patch.object(tier_module, "SLOW_READ_S", 1e9):
        turn = engine.add_request(follow_up, GREEDY)
        seq = engine._seqs[turn]
        for _ in range(6):  # the disk holds the turn's first read: every step still decodes the other reply
            events = engine.step()
            assert [e for e in events_of(engine, other, events) if isinstance(e, TextDelta)]
            assert not events_of(engine, turn, events), "the turn waits for its reads"
            assert engine.kv_disk.prefetch.pending(seq) and seq in engine.scheduler.waiting
        assert len(gate.keys) == 1
        gate.allow()
        events = []
        while engine.has_work:
            events += engine.step()
    (done,) = [e for e in events_of(engine, turn, events) if isinstance(e, Finished)]
    assert done.output_ids == expected.output_ids
    assert done.metrics.num_disk_tokens == expected.metrics.num_disk_tokens > 0
    engine.block_manager.check_invariants()
    assert engine.block_manager.num_used_blocks == 0


def test_an_entry_that_fails_verification_while_read_ahead_is_computed(tiny_model, tmp_path):
    ids = chat(tiny_model)
    _, follow_up = populated(tiny_model, tmp_path, ids)
    expected = run(new_engine(tiny_model, None), follow_up)
    engine = new_engine(tiny_model, tmp_path)
    gate = GatedRead(engine.kv_disk.store, num_allowed=2)
    with mock.patch.object(engine.kv_disk.store, "read", gate):
        turn = engine.add_request(follow_up, GREEDY)  # matched on disk: three entries or more
        seq = engine._seqs[turn]
        victim = entry_path(tmp_path, seq.block_hashes[2])
        data = bytearray(victim.read_bytes())
        data[-100] ^= 0x01  # damaged after the match, before its read
        victim.write_bytes(bytes(data))
        gate.allow()
        events = []
        while engine.has_work:
            events += engine.step()
    (done,) = [e for e in events if isinstance(e, Finished)]
    assert done.output_ids == expected.output_ids
    assert done.metrics.num_disk_tokens == 2 * 16, "the two before it read back; from the bad one on, computed"
    assert done.explanation.disk == "corrupt"
    assert engine.stats().disk.session.num_corrupt == 1
    engine.block_manager.check_invariants()


def test_a_cancelled_turns_pending_reads_are_dropped(tiny_model, tmp_path):
    ids = chat(tiny_model)
    _, follow_up = populated(tiny_model, tmp_path, ids)
    engine = new_engine(tiny_model, tmp_path)
    gate = GatedRead(engine.kv_disk.store)
    loader = engine.kv_disk.prefetch.loader
    with mock.patch.object(engine.kv_disk.store, "read", gate), mock.patch.object(tier_module, "SLOW_READ_S", 1e9):
        turn = engine.add_request(follow_up, GREEDY)
        engine.step()
        assert len(gate.keys) == 1 and engine.kv_disk.prefetch.pending(engine._seqs[turn])
        assert engine.abort(turn)
        gate.allow()
        (done,) = [e for e in engine.step() if isinstance(e, Finished)]
        for _ in range(100):  # the read under way ends; no other starts
            loader.wait(0.01)
    assert done.reason is FinishReason.ABORT
    assert len(gate.keys) == 1, "the cancelled turn's other reads never happened"
    assert loader.num_held_bytes == 0 and not engine.kv_disk.prefetch.has_pending and not engine.has_work
    assert engine.block_manager.num_used_blocks == 0
    engine.block_manager.check_invariants()


def test_a_chat_warmed_on_focus_fills_in_block_by_block(tiny_model, tmp_path):
    ids = chat(tiny_model)
    first, _ = populated(tiny_model, tmp_path, ids)
    said = ids + list(first.output_ids)
    engine = new_engine(tiny_model, tmp_path)
    engine.adopt_chain("chat", said)  # the app remembers its chats at start
    gate = GatedRead(engine.kv_disk.store)
    with mock.patch.object(engine.kv_disk.store, "read", gate), mock.patch.object(tier_module, "SLOW_READ_S", 1e9):
        target = engine.warm("chat", said)
        engine.step()
        seen = [engine.prefix_tiers()["chat"].num_resident]
        for _ in range(3):
            gate.allow(1)
            while len(gate.keys) <= len(seen) and engine.kv_disk.prefetch.has_pending:
                engine.step()  # (waits for the loader between steps)
            engine.step()
            seen.append(engine.prefix_tiers()["chat"].num_resident)
        gate.allow()
        while engine.has_work:
            engine.step()
    assert seen == [0, 1, 2, 3], "each block shows as its payload arrives"
    assert threading.get_ident() not in gate.threads
    assert engine.prefix_tiers()["chat"].num_resident == target // 16
    assert not engine.window.prefill_steps, "read back, not computed"


def test_a_chat_opened_while_another_streams_is_read_back_meanwhile(tiny_model, tmp_path):
    ids = chat(tiny_model)
    first, _ = populated(tiny_model, tmp_path, ids)
    said = ids + list(first.output_ids)
    engine = new_engine(tiny_model, tmp_path)
    engine.adopt_chain("chat", said)
    other_prompt = chat_prompt(tiny_model, [{"role": "user", "content": "Another chat, nothing on disk."}])
    other = engine.add_request(other_prompt, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))
    engine.step()
    probe = GatedRead(engine.kv_disk.store, num_allowed=1_000)
    with mock.patch.object(engine.kv_disk.store, "read", probe):
        target = engine.warm("chat", said)  # the user selects the chat while the other one streams
        num_steps = 0
        while engine.prefix_tiers()["chat"].num_resident < target // 16:
            events = engine.step()
            num_steps += 1
            assert [e for e in events_of(engine, other, events) if isinstance(e, TextDelta)], "it keeps streaming"
            assert num_steps < 25, "the reads did not finish while the other chat streamed"
    assert threading.get_ident() not in probe.threads and len(probe.keys) == target // 16
    assert engine.scheduler.running, "read back before the other reply ended"
    while engine.has_work:
        engine.step()
    assert engine.prefix_tiers()["chat"].num_resident == target // 16
    engine.block_manager.check_invariants()
    assert engine.block_manager.num_used_blocks == 0


def test_an_engine_let_go_without_close_frees_its_kv_cache(tiny_model, tmp_path):
    """The loader thread outlives an engine nobody closed (as the writer thread does): it must not keep the
    engine's KV cache alive."""
    engine = new_engine(tiny_model, tmp_path)
    run(engine, chat(tiny_model))
    cache = weakref.ref(engine.kv_cache)
    del engine
    gc.collect()
    assert cache() is None
