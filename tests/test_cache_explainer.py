"""The per-turn cache explainer on the tiny model: one test per cause, each checking the reason and the
position where reuse ended (core/engine/cache_explainer.py, core/engine/reuse_memory.py, the engine's hooks)."""
from __future__ import annotations

import dataclasses

import torch

from llmchat.core.engine.block_manager import hash_block
from llmchat.core.engine.cache_explainer import PromptContext, explain_reuse
from llmchat.core.config import EngineConfig
from llmchat.core.chats.conversation import ChatSettings, Conversation
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.api.events import Finished
from llmchat.core.model.loader import LoadedModel
from llmchat.core.model.model import build_model
from llmchat.core.text.prompt import prompt_ids_for
from llmchat.core.api.params import SamplingParams

BS = 16
PARAMS = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
SYSTEM = "You are a careful assistant who answers briefly. " * 3


def run(engine: LLMEngine) -> list[Finished]:
    return [e for e in engine.run_until_done() if isinstance(e, Finished)]


def turn(engine: LLMEngine, chat: Conversation, text: str, params: SamplingParams = PARAMS) -> Finished:
    """One chat turn the way the service runs it: the kept ids + what the new message adds."""
    kept = list(chat.token_ids)
    user, reply = chat.start_turn(text)
    prompt = prompt_ids_for(engine.tokenizer, chat.template_messages(upto=reply), kept)
    context = PromptContext(tuple(kept), chat.settings.system_prompt, has_system_prompt=True)
    engine.add_request(prompt, params, tag=chat.chat_id, context=context)
    (finished,) = run(engine)
    chat.begin_reply(user, reply, prompt)
    chat.extend_reply(reply, list(finished.output_ids))
    chat.finish_reply(reply, finished.text, "done", finished.reason.value, None, finished.metrics)
    assert finished.explanation is not None
    assert finished.explanation.num_cached_tokens == finished.metrics.num_cached_tokens
    return finished


def new_chat(chat_id: int = 1, system: str | None = SYSTEM) -> Conversation:
    return Conversation(chat_id, settings=ChatSettings(system, 0.0, 1.0, 12))


def test_new_text_first_turn_and_the_next_turn(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig())
    chat = new_chat()
    first = turn(engine, chat, "What is a KV cache?").explanation
    assert first.cause == "new-text" and first.num_cached_tokens == 0 and first.num_known_tokens == 0
    known = len(chat.token_ids)
    second = turn(engine, chat, "And a block?").explanation
    assert second.cause == "new-text"
    assert second.num_known_tokens == known  # the new text starts right after the chat's ids
    assert second.num_cached_tokens == (known - 1) // BS * BS  # every full block it had computed
    assert second.num_recomputed_tokens == known - second.num_cached_tokens  # the last partial block's cost


def test_partial_block_when_regenerating(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig())
    chat = new_chat()
    turn(engine, chat, "Tell me about caches")
    prompt = chat.token_ids[: chat.messages[-1].token_span[0]]  # the same prompt again: a regenerate
    kept = chat.token_ids[: chat.messages[-2].token_span[0]]
    engine.add_request(prompt, PARAMS, tag=1, context=PromptContext(tuple(kept), SYSTEM, True))
    (finished,) = run(engine)
    e = finished.explanation
    assert e.cause == "partial-block" and e.num_new_tokens == 0
    assert e.num_cached_tokens == (len(prompt) - 1) // BS * BS
    assert e.num_recomputed_tokens == len(prompt) - e.num_cached_tokens < 2 * BS


def test_system_prompt_changed(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig())
    chat = new_chat()
    turn(engine, chat, "Hello")
    before = list(chat.token_ids)
    chat.settings = ChatSettings("You are a pirate. " * 3, 0.0, 1.0, 12)
    finished = turn(engine, chat, "Hello again")
    e = finished.explanation
    prompt = chat.token_ids[: chat.messages[-1].token_span[0]]
    position = next(i for i, (a, b) in enumerate(zip(before, prompt)) if a != b)
    assert e.cause == "system-prompt" and e.divergence == position
    assert e.earlier_token == tiny_model.tokenizer.decode([before[position]])
    assert e.prompt_token == tiny_model.tokenizer.decode([prompt[position]])
    assert e.num_cached_tokens == position // BS * BS


def test_template_rerendered_earlier_turns(tiny_model):
    """The kept ids say the reply was "Sure thing!" but its text is "Sure thing" (a stop string cut it, say):
    the template renders the text, so the prompt is re-tokenized and differs from the kept ids at the "!"."""
    engine = LLMEngine(tiny_model, EngineConfig())
    tok = tiny_model.tokenizer
    chat = new_chat()
    user, reply = chat.start_turn("Can you help me?")
    first_prompt = prompt_ids_for(tok, chat.template_messages(upto=reply))
    chat.begin_reply(user, reply, first_prompt)
    reply_ids = tok.encode("Sure thing!", add_bos=False) + [tok.token_to_id("<|im_end|>")]
    chat.extend_reply(reply, reply_ids)
    chat.finish_reply(reply, "Sure thing", "done", "stop")
    engine.add_request(list(chat.token_ids), SamplingParams(temperature=0, max_tokens=1), tag=1,
                       context=PromptContext((), SYSTEM, True))
    run(engine)  # the engine computed (and cached) the kept ids
    e = turn(engine, chat, "Thanks").explanation
    position = len(first_prompt) + len(tok.encode("Sure thing", add_bos=False))
    assert e.cause == "template" and e.divergence == position
    assert e.earlier_token == "!" and e.prompt_token == "<|im_end|>"
    assert e.num_cached_tokens == position // BS * BS


def test_blocks_evicted(tiny_model):
    num_blocks = 12
    engine = LLMEngine(tiny_model, EngineConfig(kv_cache_bytes=num_blocks * BS * 2 * 2 * 2 * 16 * 4))
    assert engine.block_manager.num_blocks == num_blocks
    chat = new_chat(system=None)
    turn(engine, chat, "Tell me about the sea and the sky and the stars " * 3)
    num_chat_blocks = (len(chat.token_ids) - 1) // BS
    filler = list(range(1000, 1000 + num_blocks * BS - 2))  # another request takes every block: LRU evicts all
    engine.add_request(filler, SamplingParams(temperature=0, max_tokens=1))
    run(engine)
    e = turn(engine, chat, "More").explanation
    assert e.cause == "evicted" and e.num_cached_tokens == 0
    assert e.num_evicted_blocks == num_chat_blocks
    assert e.evicted_seconds_ago is not None and 0 < e.evicted_seconds_ago < 60


def test_not_cached_after_a_restart(tiny_model):
    chat = new_chat()
    turn(LLMEngine(tiny_model, EngineConfig()), chat, "Remember this")
    e = turn(LLMEngine(tiny_model, EngineConfig()), chat, "Again").explanation  # a fresh engine: nothing cached
    assert e.cause == "not-cached" and e.num_cached_tokens == 0 and e.num_known_tokens > BS


def test_prefix_cache_off_for_a_request_and_for_the_engine(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig())
    chat = new_chat()
    turn(engine, chat, "Hello")
    engine.add_request(list(chat.token_ids), PARAMS, use_prefix_cache=False)
    (finished,) = run(engine)
    assert finished.explanation.cause == "cache-off" and finished.metrics.num_cached_tokens == 0
    off = LLMEngine(tiny_model, EngineConfig(enable_prefix_caching=False))
    assert turn(off, new_chat(), "Hello").explanation.cause == "cache-off"


def test_another_model_fingerprint(tiny_model):
    """The chat's earlier KV came from another model (its remembered turn carries another fingerprint)."""
    engine = LLMEngine(tiny_model, EngineConfig())
    chat = new_chat()
    turn(engine, chat, "Hello")
    cfg = dataclasses.replace(tiny_model.config, num_hidden_layers=1)
    torch.manual_seed(1)
    other = LLMEngine(LoadedModel(tiny_model.folder, cfg, build_model(cfg, None), tiny_model.tokenizer, 0.0),
                      EngineConfig())
    assert other.block_manager.fingerprint != engine.block_manager.fingerprint
    other.reuse.priors[chat.chat_id] = engine.reuse.priors[chat.chat_id]
    e = turn(other, chat, "Again").explanation
    assert e.cause == "model" and e.num_cached_tokens == 0


def test_preempted_request_says_so(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(kv_cache_bytes=6 * BS * 2 * 2 * 2 * 16 * 4, max_num_batched_tokens=64))
    long = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    engine.add_request(list(range(100, 130)), long)
    engine.add_request(list(range(200, 230)), long)
    done = run(engine)
    assert max(f.metrics.num_preemptions for f in done) > 0
    for f in done:
        assert f.explanation.num_preemptions == f.metrics.num_preemptions


def test_explain_reuse_is_pure_and_checks_positions():
    prompt = list(range(40))
    e = explain_reuse(prompt, 32, BS, context=PromptContext(tuple(range(35))))
    assert (e.cause, e.num_known_tokens, e.num_recomputed_tokens, e.num_new_tokens) == ("new-text", 35, 3, 5)
    e = explain_reuse(prompt, 16, BS, context=PromptContext(tuple(range(35))), block_hashes=[b"a", b"b"],
                      evicted_at={b"b": 5.0}.get, now=7.5)
    assert (e.cause, e.num_evicted_blocks, e.evicted_seconds_ago) == ("evicted", 1, 2.5)


# -- the disk tier --------------------------------------------------------------------------------
def disk_engine(loaded, disk_dir) -> LLMEngine:
    return LLMEngine(loaded, EngineConfig(kv_disk_bytes=1 << 30, kv_disk_dir=str(disk_dir)))


def restarted(engine: LLMEngine, loaded, disk_dir) -> LLMEngine:
    engine.close()  # its writes land; its memory is gone
    return disk_engine(loaded, disk_dir)


def test_disk_hit_after_a_restart(tiny_model, tmp_path):
    engine = disk_engine(tiny_model, tmp_path / "kv")
    chat = new_chat()
    turn(engine, chat, "Tell me about the sea")
    known = len(chat.token_ids)
    engine = restarted(engine, tiny_model, tmp_path / "kv")
    e = turn(engine, chat, "And the sky?").explanation
    assert e.cause == "new-text" and e.disk == "hit"
    assert e.num_disk_tokens == e.num_cached_tokens == (known - 1) // BS * BS
    engine.close()


def test_disk_miss_after_a_restart(tiny_model, tmp_path):
    chat = new_chat()
    turn(LLMEngine(tiny_model, EngineConfig()), chat, "Tell me about the sea")  # an engine without the tier
    engine = disk_engine(tiny_model, tmp_path / "kv")
    e = turn(engine, chat, "And the sky?").explanation
    assert e.cause == "disk-miss" and e.disk == "miss" and e.num_cached_tokens == 0 and e.num_disk_tokens == 0
    engine.close()


def test_disk_corrupt_entry(tiny_model, tmp_path):
    from llmchat.core.kvdisk.folder import entry_path

    engine = disk_engine(tiny_model, tmp_path / "kv")
    chat = new_chat()
    turn(engine, chat, "Tell me about the sea")
    ids = chat.token_ids  # (the blocks the engine cached: prompt and reply)
    assert (len(ids) - 1) // BS >= 3
    hashes = []
    for i in range(3):
        hashes.append(hash_block(hashes[-1] if hashes else None, ids[i * BS : (i + 1) * BS],
                                 engine.block_manager.fingerprint))
    engine = restarted(engine, tiny_model, tmp_path / "kv")
    victim = entry_path(tmp_path / "kv", hashes[2])
    data = bytearray(victim.read_bytes())
    data[-100] ^= 0x01  # one flipped bit in the third block's K/V
    victim.write_bytes(bytes(data))
    e = turn(engine, chat, "And the sky?").explanation
    assert e.cause == "disk-corrupt" and e.disk == "corrupt"
    assert e.num_cached_tokens == e.num_disk_tokens == 2 * BS  # reuse ended at the bad block
    engine.close()
