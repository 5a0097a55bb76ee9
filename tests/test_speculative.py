"""Speculative decoding: greedy output identical with it on and off (prefix hits, chunked prefill, preemption,
rejected drafts, a draft model), the sampled distribution equal to the target's (chi-square at fixed seeds),
rejected tokens rolled back (slots freed, never hashed), prompt lookup against a brute-force search, and k
backing off when drafts fail."""
from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmchat.core.config import DEFAULT_SPECULATIVE_TOKENS, EngineConfig
from llmchat.core.model.dense import DenseKV, generate_dense
from llmchat.core.engine.spec.draft import NgramIndex
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.inspect.engine_facts import facts_of
from llmchat.core.api.events import Finished, TextDelta
from llmchat.core.model.loader import LoadedModel
from llmchat.core.model.model import build_model
from llmchat.core.model.sampling import SamplingParams, filtered_probs
from llmchat.core.engine.spec.verify import verify_drafts
from llmchat.core.engine.spec.speculative import MAX_DECODE_ROWS, AdaptiveK
from llmchat.tui.commands.cli import build_parser, engine_config

OFF = EngineConfig(num_speculative_tokens=0)
LONG = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)


def run(engine: LLMEngine, requests, check_each_step=None) -> list[Finished]:
    ids = [engine.add_request(p, params) for p, params in requests]
    done: dict[int, Finished] = {}
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, Finished):
                done[event.request_id] = event
        if check_each_step:
            check_each_step(engine)
    engine.block_manager.check_invariants()
    assert engine.block_manager.num_used_blocks == 0
    return [done[i] for i in ids]


def prompts_for(tokenizer) -> list[list[int]]:
    shared = "You are a helpful assistant who repeats things. " * 3  # a shared full block or more
    texts = ["alpha beta gamma delta " * 5, "the cat sat on the mat, the cat sat on the mat, and then", "1 2 3 4 5 6 7",
             "what is the capital of france?", "red green blue red green blue red green"]
    return [tokenizer.encode(shared + t) for t in texts]


def outputs(results: list[Finished]) -> list[tuple[int, ...]]:
    return [r.output_ids for r in results]


@pytest.mark.parametrize("overrides", [
    {},  # prefix hits (the shared prefix is warmed first)
    {"max_num_batched_tokens": 20},  # chunked prefill, and drafts cut by the token budget
    {"kv_cache_bytes": "tiny"},  # preemption by recompute
])
def test_greedy_output_identical_with_speculation_on_and_off(tiny_model, overrides):
    overrides = dict(overrides)
    if overrides.get("kv_cache_bytes") == "tiny":
        overrides["kv_cache_bytes"] = 12 * 16 * tiny_model.config.kv_bytes_per_token(4)
    prompts = prompts_for(tiny_model.tokenizer)
    results = {}
    for name, spec_tokens in (("on", 4), ("off", 0)):
        engine = LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=spec_tokens, **overrides))
        engine.speculator.proposer = SometimesWrong(engine.speculator.proposer, seed=3)
        engine.speculator.max_decode_rows = 64  # every sequence may draft in the same step
        run(engine, [(prompts[0], SamplingParams(temperature=0, max_tokens=2))])  # warm the shared prefix
        results[name] = run(engine, [(p, LONG) for p in prompts])
    assert outputs(results["on"]) == outputs(results["off"])
    dense = [tuple(generate_dense(tiny_model.model, p, LONG)) for p in prompts]
    assert outputs(results["on"]) == dense
    on = [r.metrics for r in results["on"]]
    assert sum(m.num_accepted_tokens for m in on) > 0 and any(m.tokens_per_forward > 1 for m in on)
    assert sum(m.num_draft_tokens - m.num_accepted_tokens for m in on) > 0, "some drafts were rejected"
    if "kv_cache_bytes" in overrides:
        assert sum(m.num_preemptions for m in on) > 0
    else:
        assert all(m.num_cached_tokens >= 16 for m in on)  # the shared prefix: prefix hits
    off = [r.metrics for r in results["off"]]
    assert all(m.num_draft_tokens == 0 and m.tokens_per_forward == 1 for m in off)


class SometimesWrong:
    """Prompt lookup, with one drafted token made wrong in a third of the drafts: the tiny model repeats
    itself so well that plain prompt lookup is almost never rejected."""

    def __init__(self, inner, seed: int) -> None:
        self.inner = inner
        self.rng = random.Random(seed)

    def propose(self, seq, state, k):
        ids, probs = self.inner.propose(seq, state, k)
        if ids and self.rng.random() < 0.33:
            wrong = self.rng.randrange(len(ids))
            ids = [*ids[:wrong], (ids[wrong] + 1) % 1000, *ids[wrong + 1 :]]
        return ids, probs


class WrongThenRightProposer:
    """Drafts the true continuation (from the dense reference) with a wrong token at a random place: every
    step verifies drafts, some kept, the rest rejected."""

    def __init__(self, truth: dict[tuple[int, ...], list[int]], seed: int) -> None:
        self.truth = truth
        self.rng = random.Random(seed)

    def propose(self, seq, state, k):
        prompt = tuple(seq.token_ids[: seq.num_prompt_tokens])
        upcoming = self.truth[prompt][seq.num_output_tokens : seq.num_output_tokens + k]
        if upcoming and self.rng.random() < 0.7:
            wrong = self.rng.randrange(len(upcoming))
            upcoming = [*upcoming[:wrong], (upcoming[wrong] + 1) % 1000, *upcoming[wrong + 1 :]]
        return upcoming, None


def check_rollback(engine: LLMEngine) -> None:
    """After every step: each running sequence holds blocks for its tokens only (the slots of rejected
    tokens freed), and every hashed block holds the tokens its sequence really has there."""
    bm = engine.block_manager
    bm.check_invariants()
    for seq in engine.scheduler.running:
        assert seq.num_computed_tokens <= seq.num_tokens
        assert len(seq.block_table) <= bm.num_blocks_for(seq.num_tokens)
        for i, block_id in enumerate(seq.block_table):
            block = bm.blocks[block_id]
            if block.block_hash is not None:
                assert block.token_ids == tuple(seq.token_ids[i * 16 : (i + 1) * 16])
                assert (i + 1) * 16 <= seq.num_computed_tokens


def test_rejected_tokens_are_rolled_back_and_never_cached(tiny_model):
    prompts = prompts_for(tiny_model.tokenizer)[:3]
    truth = {tuple(p): list(generate_dense(tiny_model.model, p, LONG)) for p in prompts}
    engine = LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=6))
    engine.speculator.proposer = WrongThenRightProposer(truth, seed=1)
    engine.speculator.max_decode_rows = 64
    results = run(engine, [(p, LONG) for p in prompts], check_rollback)
    assert [list(r.output_ids) for r in results] == [truth[tuple(p)] for p in prompts]
    drafted = sum(r.metrics.num_draft_tokens for r in results)
    accepted = sum(r.metrics.num_accepted_tokens for r in results)
    assert 0 < accepted < drafted
    # every cached block is a block of some prompt + verified reply: nothing rejected was ever hashed
    bm = engine.block_manager
    full = {tuple(p) + tuple(r.output_ids) for p, r in zip(prompts, results)}
    for block in bm.blocks:
        if block.block_hash is not None:
            assert any(block.token_ids in {ids[i : i + 16] for i in range(0, len(ids) - 15, 16)} for ids in full)


def test_a_stop_string_inside_kept_drafts_ends_the_reply_where_plain_decoding_does(tiny_model):
    prompt = prompts_for(tiny_model.tokenizer)[0]
    reference = list(generate_dense(tiny_model.model, prompt, LONG))
    (plain,) = run(LLMEngine(tiny_model, OFF), [(prompt, LONG)])
    stop = plain.text[len(plain.text) // 2 :][:3]  # some text in the middle of the reply
    assert stop
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True, stop=(stop,))
    (off,) = run(LLMEngine(tiny_model, OFF), [(prompt, params)])
    engine = LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=8))
    engine.speculator.proposer = WrongThenRightProposer({tuple(prompt): reference}, seed=2)
    (on,) = run(engine, [(prompt, params)])
    assert on.output_ids == off.output_ids and on.text == off.text and len(off.output_ids) < 60
    assert on.metrics.num_accepted_tokens > 0 and on.metrics.num_output_tokens == len(on.output_ids)


def test_max_tokens_cuts_kept_drafts(tiny_model):
    prompt = prompts_for(tiny_model.tokenizer)[0]
    reference = list(generate_dense(tiny_model.model, prompt, LONG))
    for max_tokens in (2, 3, 7):
        engine = LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=8))
        engine.speculator.proposer = WrongThenRightProposer({tuple(prompt): reference}, seed=max_tokens)
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        (result,) = run(engine, [(prompt, params)])
        assert list(result.output_ids) == reference[:max_tokens]


def test_text_deltas_mark_exactly_the_kept_drafted_tokens(tiny_model):
    """The UI underlines drafted tokens the model kept (F6): in every step a request's deltas are its kept
    drafts (drafted=True), then the one token the target sampled (drafted=False)."""
    prompt = prompts_for(tiny_model.tokenizer)[0]
    reference = list(generate_dense(tiny_model.model, prompt, LONG))
    engine = LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=6))
    engine.speculator.proposer = WrongThenRightProposer({tuple(prompt): reference}, seed=3)
    engine.add_request(prompt, LONG)
    flags_by_step: list[list[bool]] = []
    finished = None
    while engine.has_work:
        events = engine.step()
        flags_by_step.append([e.drafted for e in events if isinstance(e, TextDelta) and e.token_ids])
        finished = next((e for e in events if isinstance(e, Finished)), finished)
    for flags in flags_by_step[:-1]:
        assert flags == [True] * (len(flags) - 1) + [False] * bool(flags)
    last = flags_by_step[-1]  # a finish may cut the step's tokens short
    assert last == [True] * len(last) or last == [True] * (len(last) - 1) + [False]
    num_marked = sum(sum(flags) for flags in flags_by_step)
    assert 0 < num_marked <= finished.metrics.num_accepted_tokens
    assert finished.metrics.num_accepted_tokens - num_marked < 6  # only the last step's cut drafts are unmarked
    plain = LLMEngine(tiny_model, OFF)
    plain.add_request(prompt, LONG)
    while plain.has_work:
        assert not any(e.drafted for e in plain.step() if isinstance(e, TextDelta))


def test_drafts_stay_within_the_steps_decode_row_budget_best_acceptance_first(tiny_model):
    """A forward costs about one row's time only up to a few rows: the drafts of a step never take the
    decode rows past the budget (it goes to the best recent acceptance first), and the output stays exact."""
    prompts = prompts_for(tiny_model.tokenizer)[:4]
    truth = {tuple(p): list(generate_dense(tiny_model.model, p, LONG)) for p in prompts}
    engine = LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=4))
    speculator = engine.speculator
    speculator.proposer = WrongThenRightProposer(truth, seed=4)
    assert speculator.max_decode_rows == MAX_DECODE_ROWS
    rows_per_step: list[tuple[int, int]] = []
    propose = speculator.propose

    def checked_propose(running):
        propose(running)
        decoding = [s for s in running if s.num_computed_tokens == s.num_tokens - 1]
        rows_per_step.append((len(decoding), sum(len(s.draft_ids) for s in decoding)))

    speculator.propose = checked_propose
    results = run(engine, [(p, LONG) for p in prompts])
    assert [list(r.output_ids) for r in results] == [truth[tuple(p)] for p in prompts]
    assert all(n + drafted <= max(n, MAX_DECODE_ROWS) for n, drafted in rows_per_step)
    assert any(n == 4 and drafted == MAX_DECODE_ROWS - 4 for n, drafted in rows_per_step)  # the budget is used


# -- a draft model ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_draft(tiny_model) -> LoadedModel:
    """A different, even smaller random model with the same vocabulary (1 layer, hidden 32)."""
    cfg = dataclasses.replace(tiny_model.config, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    torch.manual_seed(1)
    return LoadedModel(tiny_model.folder, cfg, build_model(cfg, None), tiny_model.tokenizer, 0.0)


def test_draft_model_keeps_greedy_output_and_a_copy_of_the_target_is_always_right(tiny_model, tiny_draft):
    prompts = prompts_for(tiny_model.tokenizer)[:3]
    off = run(LLMEngine(tiny_model, OFF), [(p, LONG) for p in prompts])
    config = EngineConfig(num_speculative_tokens=4, max_num_batched_tokens=24)
    drafted = run(LLMEngine(tiny_model, config, draft=tiny_draft), [(p, LONG) for p in prompts])
    assert outputs(drafted) == outputs(off)
    assert all(r.metrics.num_draft_tokens > 0 for r in drafted)
    copy_engine = LLMEngine(tiny_model, config, draft=tiny_model)
    copy_engine.speculator.max_decode_rows = 64  # all three draft k tokens every step
    copy = run(copy_engine, [(p, LONG) for p in prompts])
    assert outputs(copy) == outputs(off)
    for r in copy:  # the draft is the target itself: every drafted token is kept
        assert r.metrics.num_draft_tokens > 0 and r.metrics.acceptance_rate == 1.0
        assert r.metrics.tokens_per_forward > 2


def test_engine_facts_count_a_chat_with_kept_drafts_as_one_chat_decoding(tiny_model):
    """The F1 screen's batch points group steps by sequences decoded, not tokens: one chat whose drafts are
    all kept is one chat decoding several tokens per step (it was shown as '3 chats decoding')."""
    engine = LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=4), draft=tiny_model)
    [result] = run(engine, [(prompts_for(tiny_model.tokenizer)[0], LONG)])
    assert result.metrics.tokens_per_forward > 2
    facts = facts_of(engine, None)
    assert [p.batch_size for p in facts.batch] == [1] and facts.speculative_tokens == 4
    [point] = facts.batch
    steps = list(engine.window.decode_steps)
    assert point.num_steps == len(steps) and all(s.num_decode_seqs == 1 for s in steps)
    assert point.tokens_per_s == pytest.approx(sum(s.num_decode_tokens for s in steps) / sum(s.seconds for s in steps))
    assert sum(s.num_decode_tokens for s in steps) > 2 * len(steps)  # kept drafts: several tokens per step
    assert point.tpot == pytest.approx(1 / point.tokens_per_s)  # one chat: its TPOT is the aggregate's inverse


def test_draft_model_with_another_vocabulary_is_refused(tiny_model, tiny_draft):
    cfg = dataclasses.replace(tiny_draft.config, vocab_size=tiny_draft.config.vocab_size - 1)
    other = LoadedModel(tiny_draft.folder, cfg, tiny_draft.model, tiny_draft.tokenizer, 0.0)
    with pytest.raises(ValueError, match="same model family"):
        LLMEngine(tiny_model, EngineConfig(), draft=other)


def test_sampled_draft_model_requests_run_and_are_reproducible(tiny_model, tiny_draft):
    prompt = prompts_for(tiny_model.tokenizer)[1]
    params = SamplingParams(temperature=0.8, top_k=20, seed=7, max_tokens=30, ignore_eos=True)
    a = run(LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=4), draft=tiny_draft), [(prompt, params)])[0]
    b = run(LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=4), draft=tiny_draft), [(prompt, params)])[0]
    assert a.output_ids == b.output_ids and len(a.output_ids) == 30 and a.metrics.num_draft_tokens > 0


# -- the sampled distribution ----------------------------------------------------------------
def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test of observed counts against expected probabilities; cells expecting fewer
    than 5 are pooled into one (the usual validity rule)."""
    assert counts[probs == 0].sum() == 0, "a token the target can never emit was emitted"
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    observed = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    expected = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    if expected[-1] < 5:  # too little left over to be a cell of its own: merge it into the smallest cell
        observed = torch.cat([observed[:-2], (observed[-2] + observed[-1]).reshape(1)]) if len(observed) > 2 else observed
        expected = torch.cat([expected[:-2], (expected[-2] + expected[-1]).reshape(1)]) if len(expected) > 2 else expected
    stat = ((observed - expected) ** 2 / expected).sum()
    dof = len(expected) - 1
    assert dof >= 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), stat.double() / 2))


VOCAB = slice(1000, 1512)  # a slice of the vocabulary the tiny random model spreads its probability over
SAMPLED = SamplingParams(temperature=4.0, top_k=6)


@torch.inference_mode()
def logits_after(loaded: LoadedModel, context: list[int], drafts: list[int]) -> torch.Tensor:
    """The model's logits over VOCAB at the last context token and after each drafted token (drafts are
    numbered within VOCAB): `[len(drafts) + 1, 512]`."""
    model = loaded.model
    ids = context + [VOCAB.start + d for d in drafts]
    kv = DenseKV(model, len(ids))
    hidden = model(torch.tensor(ids), torch.arange(len(ids)), kv)
    return model.compute_logits(hidden[len(context) - 1 :])[:, VOCAB]


NUM_SEEDS = 4000


@pytest.mark.parametrize("draft_kind", ["one-hot", "draft-model"])
def test_sampled_tokens_follow_the_target_distribution(tiny_model, tiny_draft, draft_kind):
    """4000 fixed seeds: the first emitted token is distributed as the target's p0, and when the first draft is
    kept, the second as p1 after it (chi-square, p > 0.001; fixed seeds make it deterministic). The target is the tiny
    model over a 512-token slice of its vocabulary at temperature 4, top-k 6 (its full distribution is too
    peaked to test anything)."""
    context = tiny_model.tokenizer.encode("the cat sat on the")
    p0 = filtered_probs(logits_after(tiny_model, context, [])[0], SAMPLED)
    second = int(torch.topk(p0, 2).indices[1])  # a likely but not the likeliest token: both branches happen
    first_counts = torch.zeros_like(p0)
    second_counts: dict[int, torch.Tensor] = {}  # per kept first draft: what came after it
    rows_for: dict[int, torch.Tensor] = {}
    # a draft that half agrees with the target (alone, the tiny draft's top 6 miss the target's: nothing is kept)
    draft_q = 0.5 * p0 + 0.5 * filtered_probs(logits_after(tiny_draft, context, [])[0], SAMPLED)
    for seed in range(NUM_SEEDS):
        gen = torch.Generator().manual_seed(seed)
        if draft_kind == "one-hot":
            d1, q = second, None
        else:
            d1 = int(torch.multinomial(draft_q, 1, generator=gen))
            q = torch.stack([draft_q, draft_q])
        drafts = [d1, second]
        if d1 not in rows_for:
            rows_for[d1] = logits_after(tiny_model, context, drafts)
        out = verify_drafts(rows_for[d1], drafts, q, SAMPLED, gen)
        first_counts[out[0]] += 1
        if out[0] == d1:
            second_counts.setdefault(d1, torch.zeros_like(p0))[out[1]] += 1
    assert chi_square_p_value(first_counts, p0) > 1e-3
    d1, counts = max(second_counts.items(), key=lambda item: item[1].sum())
    assert counts.sum() > 300
    assert chi_square_p_value(counts, filtered_probs(rows_for[d1][1], SAMPLED)) > 1e-3


def test_chi_square_check_rejects_a_wrong_distribution(tiny_model):
    """The check above has power: counts drawn from a distribution a little off fail it."""
    p0 = filtered_probs(logits_after(tiny_model, tiny_model.tokenizer.encode("the cat sat on the"), [])[0], SAMPLED)
    skewed = p0.clone()
    skewed[torch.argmax(p0)] *= 1.3  # the likeliest token 30% likelier than it should be
    skewed /= skewed.sum()
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.multinomial(skewed, NUM_SEEDS, replacement=True, generator=gen),
                            minlength=len(p0)).float()
    assert chi_square_p_value(counts, p0) < 1e-3
    right = torch.bincount(torch.multinomial(p0, NUM_SEEDS, replacement=True, generator=gen), minlength=len(p0))
    assert chi_square_p_value(right.float(), p0) > 1e-3


def test_greedy_verification_keeps_the_matching_prefix():
    logits = torch.full((4, 10), -1.0)
    for row, best in enumerate([3, 5, 1, 8]):
        logits[row, best] = 2.0
    greedy = SamplingParams(temperature=0)
    assert verify_drafts(logits, [3, 5, 1], None, greedy, None) == [3, 5, 1, 8]
    assert verify_drafts(logits, [3, 4, 1], None, greedy, None) == [3, 5]
    assert verify_drafts(logits, [0, 5, 1], None, greedy, None) == [3]


# -- prompt lookup and adaptive k ---------------------------------------------------------------
def continuation_ref(token_ids: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """Brute force: the longest n whose last-n tokens occurred earlier; take the latest such occurrence."""
    num = len(token_ids)
    for n in range(max_n, min_n - 1, -1):
        if num <= n:
            continue
        suffix = token_ids[num - n :]
        for start in range(num - 1, n - 1, -1):  # start: the position right after an earlier occurrence
            if token_ids[start - n : start] == suffix:
                ext = list(token_ids)
                for i in range(k):
                    ext.append(ext[start + i])
                return ext[num:]
    return []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=60), st.integers(1, 6), st.data())
def test_ngram_index_matches_brute_force(token_ids, k, data):
    index = NgramIndex(2, 4)
    cut = data.draw(st.integers(1, len(token_ids)))  # index grown over a prefix first, then extended
    index.continuation(token_ids[:cut], k)
    assert index.continuation(token_ids, k) == continuation_ref(token_ids, k, 2, 4)


def test_adaptive_k_grows_on_success_and_pauses_on_failure():
    k = AdaptiveK(max_k=8)
    for _ in range(5):
        k.observe(k.next_k(), k.k)  # every draft kept
    assert k.next_k() == 8
    drafted_steps = 0
    for _ in range(400):  # nothing ever kept: drafting almost stops
        n = k.next_k()
        if n:
            drafted_steps += 1
            k.observe(n, 0)
    assert drafted_steps < 20
    assert k.next_k() in (0, 1)
    while (n := k.next_k()) == 0:
        pass
    for _ in range(5):  # good again: back to full speed
        k.observe(n, n)
        n = k.next_k()
    assert k.next_k() == 8


def test_speculation_off_by_config_and_bad_values_refused(tiny_model):
    with pytest.raises(ValueError, match="speculative tokens"):
        EngineConfig(num_speculative_tokens=-1)
    with pytest.raises(ValueError, match="speculative tokens"):
        EngineConfig(num_speculative_tokens=99)
    assert not LLMEngine(tiny_model, OFF).speculator.enabled
    assert not LLMEngine(tiny_model, EngineConfig()).speculator.enabled  # off unless asked for


@pytest.mark.parametrize("argv, num_tokens", [
    ([], DEFAULT_SPECULATIVE_TOKENS),  # on by default
    (["--speculative"], DEFAULT_SPECULATIVE_TOKENS),
    (["--speculative", "--speculative-tokens", "6"], 6),
    (["--speculative-tokens", "3"], 3),
    (["--draft-model", "some/folder"], DEFAULT_SPECULATIVE_TOKENS),
    (["--no-speculative"], 0),
    (["--speculative", "--no-speculative"], 0),
    (["--speculative-tokens", "5", "--no-speculative"], 0),
    (["--speculative-tokens", "0"], 0),
])
def test_speculative_flags_give_the_engine_config(argv, num_tokens):
    args = build_parser().parse_args(["ask", "q", *argv])
    assert engine_config(args).num_speculative_tokens == num_tokens


def test_speculation_with_the_disk_tier_writes_blocks_that_a_restart_reads_back_exactly(tiny_model, tmp_path):
    """Blocks filled while drafts are verified (kept drafts counted, rejected ones rolled back) go to the disk
    tier; after a restart the continued chat reuses them from disk and gives the greedy tokens of a cold run."""
    def engine(num_speculative_tokens: int, disk: bool = True) -> LLMEngine:
        tier = {"kv_disk_bytes": 1 << 30, "kv_disk_dir": str(tmp_path / "kv")} if disk else {"enable_prefix_caching": False}
        return LLMEngine(tiny_model, EngineConfig(num_speculative_tokens=num_speculative_tokens, **tier))

    prompt = prompts_for(tiny_model.tokenizer)[0]
    speculating = engine(4)
    speculating.speculator.proposer = SometimesWrong(speculating.speculator.proposer, seed=5)
    first = run(speculating, [(prompt, LONG)])[0]
    assert first.metrics.num_draft_tokens > 0
    assert first.output_ids == run(engine(0, disk=False), [(prompt, LONG)])[0].output_ids
    speculating.close()
    follow_up = prompt + list(first.output_ids) + tiny_model.tokenizer.encode(" and again")
    restarted = engine(4)
    again = run(restarted, [(follow_up, LONG)])[0]
    restarted.close()
    assert again.metrics.num_disk_tokens >= 16 * ((len(prompt) + len(first.output_ids)) // 16 - 1)
    assert again.output_ids == run(engine(0, disk=False), [(follow_up, LONG)])[0].output_ids
