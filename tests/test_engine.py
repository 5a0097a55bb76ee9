"""The paged engine against the dense reference: same greedy tokens with prefix hits, chunked prefill,
preemption; chats reuse their past; bad input is refused cleanly."""
from __future__ import annotations

import threading

import pytest

from llmchat.core.config import EngineConfig
from llmchat.core.chats.conversation import ChatSettings, Conversation
from llmchat.core.model.dense import generate_dense
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.api.events import Finished, Started, TextDelta
from llmchat.core.model.loader import load_model
from llmchat.core.text.prompt import prompt_ids_for
from llmchat.core.api.params import SamplingParams
from llmchat.core.engine.sequence import FinishReason
from llmchat.core.backends.service import EngineService, RequestHandle

QUESTIONS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "What is 2+2?",
    "Name three colors.",
    "Give me a tip for learning to code.",
    "What is a black hole?",
    "Say hello in Spanish.",
    "Why is the sky blue? One sentence.",
]
GREEDY = SamplingParams(temperature=0, max_tokens=24)
KV_BYTES_PER_BLOCK_SMOLLM = 46080 * 16


@pytest.fixture(scope="module")
def real_model(default_model_dir):
    return load_model(default_model_dir, weight_dtype="float32")  # the reference format, for exactness


def run_to_end(engine: LLMEngine, requests: list[tuple[list[int], SamplingParams]]) -> list[Finished]:
    ids = [engine.add_request(p, params) for p, params in requests]
    done: dict[int, Finished] = {}
    texts: dict[int, list[str]] = {i: [] for i in ids}
    for _ in range(10_000):
        if not engine.has_work:
            break
        for event in engine.step():
            if isinstance(event, TextDelta):
                texts[event.request_id].append(event.text)
            else:
                done[event.request_id] = event
    assert set(done) == set(ids), "every request finishes"
    for i in ids:  # the streamed deltas add up to the final text
        assert "".join(texts[i]) == done[i].text
    engine.block_manager.check_invariants()
    assert engine.block_manager.num_used_blocks == 0, "no block leaks once everything finished"
    return [done[i] for i in ids]


def dense_outputs(loaded, prompts, params=GREEDY) -> list[tuple[int, ...]]:
    return [tuple(generate_dense(loaded.model, p, params, loaded.tokenizer.stop_token_ids)) for p in prompts]


@pytest.fixture(scope="module")
def real_prompts(real_model):
    return [prompt_ids_for(real_model.tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]


@pytest.fixture(scope="module")
def real_expected(real_model, real_prompts):
    return dense_outputs(real_model, real_prompts)


@pytest.mark.slow
def test_batch_of_8_matches_dense_with_prefix_hits(real_model, real_prompts, real_expected):
    engine = LLMEngine(real_model, EngineConfig(kv_cache_bytes=256 * KV_BYTES_PER_BLOCK_SMOLLM))
    run_to_end(engine, [(real_prompts[0], GREEDY)])  # warms the shared system-prompt blocks
    results = run_to_end(engine, [(p, GREEDY) for p in real_prompts])
    assert [r.output_ids for r in results] == real_expected
    assert all(r.metrics.num_cached_tokens >= 16 for r in results), "the shared system prompt is reused"
    assert results[0].metrics.num_cached_tokens == (len(real_prompts[0]) - 1) // 16 * 16


@pytest.mark.slow
def test_batch_matches_dense_with_chunked_prefill(real_model, real_prompts, real_expected):
    engine = LLMEngine(real_model, EngineConfig(max_num_batched_tokens=20, enable_prefix_caching=False))
    results = run_to_end(engine, [(p, GREEDY) for p in real_prompts])
    assert [r.output_ids for r in results] == real_expected


@pytest.mark.slow
def test_batch_matches_dense_under_preemption(real_model, real_prompts, real_expected):
    engine = LLMEngine(real_model, EngineConfig(kv_cache_bytes=10 * KV_BYTES_PER_BLOCK_SMOLLM))
    results = run_to_end(engine, [(p, GREEDY) for p in real_prompts])
    assert [r.output_ids for r in results] == real_expected
    assert sum(r.metrics.num_preemptions for r in results) > 0, "a tiny KV budget forces preemption"


def record_reply(chat: Conversation, user, reply, prompt: list[int], result: Finished) -> None:
    chat.begin_reply(user, reply, prompt)
    chat.extend_reply(reply, list(result.output_ids))
    chat.finish_reply(reply, result.text, "done", result.reason.value)


class EventLog:
    """A service sink that keeps every event, and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list = []
        self._cond = threading.Condition()

    def __call__(self, handle, event) -> None:
        with self._cond:
            self.events.append((handle, event))
            self._cond.notify_all()

    def wait_for(self, handle, kind, timeout: float = 30.0):
        with self._cond:
            assert self._cond.wait_for(lambda: self.of(handle, kind), timeout), f"no {kind.__name__} for {handle}"
            return self.of(handle, kind)[0]

    def of(self, handle, kind) -> list:
        return [e for h, e in self.events if h is handle and isinstance(e, kind)]


def chat_turns(loaded, config: EngineConfig, turns: list[str]) -> list[Finished]:
    engine = LLMEngine(loaded, config)
    chat = Conversation(1)
    out = []
    for text in turns:
        user, reply = chat.start_turn(text)
        prompt = prompt_ids_for(loaded.tokenizer, chat.template_messages(), chat.token_ids)
        assert prompt[: len(chat.token_ids)] == chat.token_ids, "the next prompt extends the chat's exact ids"
        (result,) = run_to_end(engine, [(prompt, SamplingParams(temperature=0, max_tokens=12))])
        record_reply(chat, user, reply, prompt, result)
        out.append((len(prompt), result))
    return out


@pytest.mark.slow
def test_chat_turns_reuse_the_past_and_match_cache_off(real_model):
    turns = ["Hi! Who are you?", "What can you do?", "Tell me a fun fact.", "Thanks!"]
    on = chat_turns(real_model, EngineConfig(), turns)
    off = chat_turns(real_model, EngineConfig(enable_prefix_caching=False), turns)
    assert [r.output_ids for _, r in on] == [r.output_ids for _, r in off]
    for (prev_prompt_len, prev), (_, cur) in zip(on, on[1:]):
        # every full block of the previous turn's prompt and reply is served from the cache; the reply's
        # last token (sampled, then the turn ended) has no KV yet, so it cannot complete a block
        previous_computed = prev_prompt_len + len(prev.output_ids) - 1
        assert cur.metrics.num_cached_tokens == previous_computed // 16 * 16
    assert all(r.metrics.num_cached_tokens == 0 for _, r in off)


def test_chats_sharing_a_system_prompt_share_blocks(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig())
    system = "You are a careful assistant. " * 8  # several full blocks
    prompts = [prompt_ids_for(tiny_model.tokenizer, [{"role": "system", "content": system},
                                                     {"role": "user", "content": q}]) for q in ("one?", "two?")]
    long_params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    engine.add_request(prompts[0], long_params, tag="first")
    for _ in range(3):
        engine.step()
    engine.add_request(prompts[1], long_params, tag="second")
    engine.step()
    blocks = engine.residency()
    shared = set(blocks["first"]) & set(blocks["second"])
    common = next(i for i, (a, b) in enumerate(zip(*prompts)) if a != b)
    assert len(shared) == common // 16
    assert all(engine.block_manager.blocks[b].ref_count == 2 for b in shared)


# -- bad input --------------------------------------------------------------------------------
def test_refusals_are_events_and_do_not_disturb_others(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig())
    ok_prompt = tiny_model.tokenizer.encode("hello there")
    too_long = [5] * (tiny_model.config.max_position_embeddings + 10)
    results = run_to_end(engine, [(ok_prompt, GREEDY), ([], GREEDY), (too_long, GREEDY)])
    assert results[0].reason in (FinishReason.STOP, FinishReason.LENGTH) and results[0].error is None
    assert results[1].reason is FinishReason.ERROR and "empty" in results[1].error
    assert results[2].reason is FinishReason.ERROR and "context" in results[2].error
    alone = run_to_end(LLMEngine(tiny_model, EngineConfig()), [(ok_prompt, GREEDY)])
    assert results[0].output_ids == alone[0].output_ids


def test_kv_budget_smaller_than_one_sequence(tiny_model):
    per_block = tiny_model.config.kv_bytes_per_token(4) * 16
    with pytest.raises(ValueError, match="kv-cache-gb"):
        LLMEngine(tiny_model, EngineConfig(kv_cache_bytes=per_block - 1))
    engine = LLMEngine(tiny_model, EngineConfig(kv_cache_bytes=2 * per_block))
    results = run_to_end(engine, [([7] * 40, GREEDY), ([7] * 10, SamplingParams(temperature=0, max_tokens=100))])
    assert results[0].reason is FinishReason.ERROR and "kv-cache-gb" in results[0].error
    assert results[1].reason is FinishReason.LENGTH and results[1].metrics.num_output_tokens == 32 - 10 + 1


def test_service_cancel_shutdown_and_threads(tiny_model):
    log = EventLog()
    service = EngineService(LLMEngine(tiny_model, EngineConfig()), log)
    prompt = tiny_model.tokenizer.encode("count with me")
    endless = SamplingParams(temperature=0, max_tokens=100_000, ignore_eos=True)
    handles = []
    threads = [threading.Thread(target=lambda: handles.append(service.submit_ids(prompt, endless))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    started = log.wait_for(handles[0], Started)
    assert list(started.prompt_ids) == prompt
    log.wait_for(handles[0], TextDelta)  # it streams
    assert service.cancel(handles[0]) is True
    result = handles[0].wait(30)
    assert result.reason is FinishReason.ABORT and result.metrics.num_output_tokens >= 1
    assert service.cancel(handles[0]) is False, "cancelling a finished request does nothing"
    assert service.cancel(RequestHandle(12345)) is False, "nor does cancelling a handle this service never issued"
    short = service.submit_ids(prompt, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    assert short.wait(30).reason is FinishReason.LENGTH
    stats = service.stats()
    assert stats.num_running + stats.num_waiting >= 2 and stats.num_blocks_used > 0
    service.shutdown()
    assert all(h.wait(30).reason is FinishReason.ABORT for h in handles[1:])
    with pytest.raises(RuntimeError, match="shut down"):
        service.submit_ids(prompt, endless)


def test_seeded_sampling_is_reproducible(tiny_model):
    prompt = tiny_model.tokenizer.encode("tell me something")
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=1234, max_tokens=16, ignore_eos=True)
    a = run_to_end(LLMEngine(tiny_model, EngineConfig()), [(prompt, params)])[0]
    b = run_to_end(LLMEngine(tiny_model, EngineConfig()), [(prompt, params), (prompt, GREEDY)])[0]
    assert a.output_ids == b.output_ids


def test_an_engine_error_fails_requests_instead_of_hanging(tiny_model, monkeypatch):
    engine = LLMEngine(tiny_model, EngineConfig())
    service = EngineService(engine)
    prompt = tiny_model.tokenizer.encode("hello")
    first = service.submit_ids(prompt, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    assert first.wait(30).reason is FinishReason.LENGTH

    def broken(batch):
        raise RuntimeError("boom")

    monkeypatch.setattr(engine.runner, "run", broken)
    failed = service.submit_ids(prompt, GREEDY)
    result = failed.wait(30)
    assert result.reason is FinishReason.ERROR and "boom" in result.error
    monkeypatch.undo()
    again = service.submit_ids(prompt, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    assert again.wait(30).reason is FinishReason.LENGTH, "the engine thread survives and serves the next request"
    assert engine.block_manager.num_used_blocks == 0
    service.shutdown()


def test_residency_shows_what_conversations_share(tiny_model):
    log = EventLog()
    service = EngineService(LLMEngine(tiny_model, EngineConfig()), log)
    settings = ChatSettings(system_prompt="You are a careful assistant. " * 8)
    chats = {cid: Conversation(cid, settings=settings) for cid in (1, 2)}
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    for cid, chat in chats.items():
        user, reply = chat.start_turn(f"question {cid}?")
        handle = service.submit(cid, chat.prompt(), params)
        result = handle.wait(30)
        record_reply(chat, user, reply, list(log.wait_for(handle, Started).prompt_ids), result)
    blocks = service.residency().result(30)
    common = next(i for i, (x, y) in enumerate(zip(chats[1].token_ids, chats[2].token_ids)) if x != y)
    assert len(set(blocks[1]) & set(blocks[2])) == common // 16
    assert len(blocks[1]) == (len(chats[1].token_ids) - 1) // 16  # every computed full block is resident
    chats[2].start_turn("and a long reply?")
    running = service.submit(2, chats[2].prompt(), SamplingParams(temperature=0, max_tokens=100_000, ignore_eos=True))
    prompt = log.wait_for(running, Started).prompt_ids
    assert list(prompt[: len(chats[2].token_ids)]) == chats[2].token_ids  # the engine extended the chat's ids
    log.wait_for(running, TextDelta)  # it is decoding
    live = service.residency().result(30)
    assert len(live[2]) >= -(-len(prompt) // 16)  # its whole block table, the partial last block included
    assert set(blocks[2]) <= set(live[2])  # the reply extends the chat's cached blocks
    service.shutdown()


def test_a_template_that_fails_refuses_only_its_request(tiny_model, monkeypatch):
    log = EventLog()
    engine = LLMEngine(tiny_model, EngineConfig())
    service = EngineService(engine, log)
    chat = Conversation(1)
    chat.start_turn("hello")

    def broken(*args, **kwargs):
        raise ValueError("no such role")

    monkeypatch.setattr(engine.tokenizer, "apply_chat_template", broken)
    result = service.submit(1, chat.prompt(), GREEDY).wait(30)
    assert result.reason is FinishReason.ERROR and "no such role" in result.error
    assert not log.of(result, Started)
    monkeypatch.undo()
    assert service.submit(1, chat.prompt(), SamplingParams(temperature=0, max_tokens=2)).wait(30).reason is not FinishReason.ERROR
    service.shutdown()


def test_stats_show_requests_in_flight(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(max_num_batched_tokens=16))
    long_prompt = tiny_model.tokenizer.encode("a fairly long prompt that needs several chunks " * 4)
    rid = engine.add_request(long_prompt, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))  # speculation may emit several per step
    engine.step()
    live = engine.stats().request(rid)
    assert live is not None and not live.waiting
    assert live.num_computed_prompt_tokens == 16 and live.num_output_tokens == 0  # chunked prefill progress
    assert live.ttft != live.ttft  # NaN: no token yet
    while engine.stats().request(rid).num_output_tokens < 3:
        engine.step()
    live = engine.stats().request(rid)
    assert live.num_computed_prompt_tokens == len(long_prompt) and live.tpot > 0 and live.ttft > 0
    while engine.has_work:
        engine.step()
    assert engine.stats().request(rid) is None


def test_a_failed_step_loses_no_event_and_every_request_finishes_once(tiny_model, monkeypatch):
    engine = LLMEngine(tiny_model, EngineConfig())
    endless = SamplingParams(temperature=0, max_tokens=100_000, ignore_eos=True)
    a = engine.add_request(tiny_model.tokenizer.encode("first"), endless)
    b = engine.add_request(tiny_model.tokenizer.encode("second"), endless)
    engine.step()
    engine.step()
    assert engine.abort(a)  # its Finished is pending...
    refused = engine.add_request([], endless)  # ...and so is a refusal's

    def broken(batch):
        raise RuntimeError("boom")

    monkeypatch.setattr(engine.runner, "run", broken)
    with pytest.raises(RuntimeError, match="boom"):
        engine.step()  # ...when the forward pass fails
    engine.recover("internal engine error: boom")
    finished = [e for e in engine.step() if isinstance(e, Finished)]
    assert sorted(e.request_id for e in finished) == sorted([a, b, refused])
    reasons = {e.request_id: e.reason for e in finished}
    assert reasons[a] is FinishReason.ABORT and reasons[b] is FinishReason.ERROR and reasons[refused] is FinishReason.ERROR
    assert engine.block_manager.num_used_blocks == 0 and not engine.has_work
