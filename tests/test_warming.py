"""Prefill while typing (core/engine/warming.py): a draft's prompt is computed in idle steps only, its blocks are
the turn's prefix-cache hits, a submitted turn or a running reply always goes first, one draft per chat."""
from __future__ import annotations

import dataclasses

from llmchat.core.api.events import Finished, Started
from llmchat.core.api.params import SamplingParams
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine

GREEDY = SamplingParams(temperature=0, max_tokens=6)


def prompt(tok, words: int, salt: str = "") -> list[int]:
    text = " ".join(f"{salt}word{i % 37}" for i in range(words))
    return tok.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", add_bos=False)


def engine_for(tiny_model, **kw) -> LLMEngine:
    return LLMEngine(tiny_model, EngineConfig(kv_cache_bytes=4 << 20, **kw))


def run(engine: LLMEngine) -> list:
    events = []
    while engine.has_work:
        events += engine.step()
    return events


def test_a_warmed_draft_is_the_turns_prefix_hit(tiny_model):
    engine = engine_for(tiny_model, max_num_batched_tokens=64)
    ids = prompt(engine.tokenizer, 120)
    target = engine.warm("chat", ids)
    assert target == (len(ids) - 1) // 16 * 16 > 100
    assert run(engine) == []  # no request: no events
    assert engine.block_manager.num_used_blocks == 0  # let go once done: its blocks are cached, not held
    engine.add_request(ids, GREEDY)
    events = run(engine)
    (started,) = [e for e in events if isinstance(e, Started)]
    assert started.num_cached_tokens == target  # Enter leaves only the tail


def test_a_running_reply_goes_first_and_a_new_turn_pauses_the_draft(tiny_model):
    engine = engine_for(tiny_model, max_num_batched_tokens=32)
    tok = engine.tokenizer
    engine.add_request(prompt(tok, 10, "other"), dataclasses.replace(GREEDY, max_tokens=12))
    target = engine.warm("chat", prompt(tok, 80))
    while engine.scheduler.running or engine.scheduler.waiting:
        engine.step()
        assert engine.scheduler.warming.progress("chat") == (0, target)  # never in a step with a request
    engine.step()
    engine.step()  # two idle steps: the draft is half-way
    done = engine.scheduler.warming.progress("chat")[0]
    assert 0 < done < target
    engine.add_request(prompt(tok, 80), GREEDY)  # the user pressed Enter
    events = run(engine)
    (started,) = [e for e in events if isinstance(e, Started)]
    assert started.num_cached_tokens >= done // 16 * 16 and started.num_cached_tokens > 0
    assert [e for e in events if isinstance(e, Finished)][0].error is None
    assert engine.block_manager.num_used_blocks == 0


def test_one_draft_per_chat_and_an_edit_keeps_the_blocks_before_it(tiny_model):
    engine = engine_for(tiny_model)
    tok = engine.tokenizer
    first = prompt(tok, 60)
    engine.warm("chat", first)
    run(engine)
    edited = first[:40] + prompt(tok, 30, "edit")
    target = engine.warm("chat", edited)
    assert engine.warm("chat", edited) == target  # the same draft asked again goes on
    assert list(engine.scheduler.warming.by_tag) == ["chat"]
    engine.step()
    # the edit's first 2 blocks (32 tokens) came from the first draft: only the rest was computed
    assert engine.window.prefill_steps[-1].num_prefill_tokens == target - 32
    assert engine.warm("tiny", tok.encode("hi", add_bos=False)) == 0  # under one block and a token: nothing


def test_warm_on_focus_reads_a_reopened_chat_back_from_disk_in_idle_steps(tiny_model, tmp_path):
    config = dict(kv_disk_bytes=64 << 20, kv_disk_dir=str(tmp_path / "kv"))
    first = engine_for(tiny_model, **config)
    ids = prompt(first.tokenizer, 100)
    first.add_request(ids, GREEDY)
    said = ids + list([e for e in run(first) if isinstance(e, Finished)][0].output_ids)
    first.close()  # the disk tier's writes land: the app was closed

    engine = engine_for(tiny_model, **config)  # the app again; the user selects the chat
    target = engine.warm("chat", said)
    assert target == (len(said) - 1) // 16 * 16
    assert run(engine) == []
    assert engine.block_manager.num_used_blocks == 0
    assert not engine.window.prefill_steps, "read back, not computed"
    engine.add_request(said + prompt(engine.tokenizer, 5, "next"), GREEDY)  # the first turn after reopening
    (started,) = [e for e in run(engine) if isinstance(e, Started)]
    assert started.num_disk_tokens == 0 and started.num_cached_tokens >= target  # all of it was in memory
