"""core/engine/scheduler.py driven with a real BlockManager and a tiny deterministic "model": each time a sequence's
tokens are all computed it gets the next token as a pure function of its token ids. So every request's output is
fixed by its prompt alone, and a run under pressure (small budgets, a tiny block pool, preemption, prefix hits)
must give exactly the output the request gets when it runs alone with a huge pool."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llmchat.core.engine.block_manager import BlockManager
from llmchat.core.api.params import SamplingParams
from llmchat.core.engine.scheduler import ScheduledBatch, Scheduler
from llmchat.core.engine.sequence import FinishReason, Sequence, SequenceStatus


def next_token(token_ids: list[int]) -> int:
    """The "model": a pure function of the whole context (its length and last three tokens)."""
    last = token_ids[-3:]
    return (7 * len(token_ids) + sum((i + 3) * t for i, t in enumerate(last))) % 50


@dataclass(slots=True)
class Request:
    prompt: list[int]
    max_tokens: int
    arrival: int = 0  # the step before which it is added


class Harness:
    """Steps a Scheduler the way the engine does and checks the scheduler's and the pool's promises every step."""

    def __init__(self, num_blocks: int, block_size: int, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_prefix_caching: bool = True):
        self.bm = BlockManager(num_blocks, block_size, enable_prefix_caching)
        self.sched = Scheduler(self.bm, max_num_seqs, max_num_batched_tokens)
        self.seqs: list[Sequence] = []
        self.dropped: list[Sequence] = []
        self.batches: list[ScheduledBatch] = []
        self.num_preempted = 0

    def add(self, prompt: list[int], max_tokens: int) -> Sequence:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        seq = Sequence(len(self.seqs), list(prompt), len(prompt), params)
        self.seqs.append(seq)
        self.sched.add(seq)
        return seq

    def step(self) -> ScheduledBatch:
        sched, bm = self.sched, self.bm
        had_work = sched.has_work
        old_running = list(sched.running)
        batch, dropped = sched.schedule()
        self._check_schedule(batch, dropped, old_running, had_work)
        sched.postprocess(batch)
        for seq in batch.seqs:
            if seq.num_computed_tokens == seq.num_tokens:  # the whole context is in the cache: one new token
                seq.token_ids.append(next_token(seq.token_ids))
                if seq.num_output_tokens >= seq.params.max_tokens:
                    sched.finish(seq, FinishReason.LENGTH)
        self.batches.append(batch)
        self.dropped += dropped
        self._check_state()
        return batch

    def run(self, requests: list[Request], max_steps: int) -> int:
        """Add each request at its arrival step; step until all are done. Returns the number of steps."""
        pending = sorted(requests, key=lambda r: r.arrival)
        step = 0
        while pending or self.sched.has_work:
            assert step < max_steps, "the scheduler stopped making progress"
            while pending and pending[0].arrival <= step:
                r = pending.pop(0)
                self.add(r.prompt, r.max_tokens)
            self.step()
            step += 1
        assert self.bm.num_used_blocks == 0, "blocks leaked"
        assert all(s.is_finished and not s.block_table for s in self.seqs)
        return step

    # -- the checks ------------------------------------------------------------------------------
    def _check_schedule(self, batch: ScheduledBatch, dropped: list[Sequence], old_running: list[Sequence],
                        had_work: bool) -> None:
        sched, bm = self.sched, self.bm
        assert batch.num_tokens <= sched.max_num_batched_tokens
        assert len(sched.running) <= sched.max_num_seqs
        assert len(set(map(id, batch.seqs))) == len(batch.seqs) == len(batch.num_new_tokens)
        if had_work:
            assert batch.seqs or dropped, "work to do, yet nothing scheduled and nothing dropped"
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            assert n >= 1 and seq.num_computed_tokens + n <= seq.num_tokens
            assert seq in sched.running and seq.status is SequenceStatus.RUNNING
            assert len(seq.block_table) * bm.block_size >= seq.num_computed_tokens + n  # room for the new KV
        for seq in dropped:
            assert seq.status is SequenceStatus.FINISHED and seq.finish_reason is FinishReason.LENGTH
            assert not seq.block_table and seq not in sched.running and seq not in sched.waiting
            assert bm.num_blocks_for(seq.num_tokens) > bm.num_blocks  # it really can never fit
        # preemption takes the newest running sequences: what stays is a prefix of the old running list
        kept = [s for s in old_running if s in sched.running]
        assert sched.running[: len(kept)] == kept == old_running[: len(kept)]
        preempted = [s for s in old_running[len(kept):] if s not in dropped]
        assert list(sched.waiting)[: len(preempted)] == preempted  # back at the head of the queue, in order
        for seq in preempted:
            assert seq.status is SequenceStatus.WAITING and not seq.block_table and seq.num_computed_tokens == 0
        if preempted:
            assert len(sched.running) == len(kept), "no admission in a step that preempted"
        self.num_preempted += len(preempted)

    def _check_state(self) -> None:
        sched, bm = self.sched, self.bm
        bm.check_invariants()
        running_ids = {id(s) for s in sched.running}
        assert not running_ids & {id(s) for s in sched.waiting}
        for block in bm.blocks:  # only running sequences hold blocks, each reference counted once
            assert block.ref_count == sum(s.block_table.count(block.block_id) for s in sched.running)
        for seq in self.seqs:
            if id(seq) in running_ids:
                assert seq.status is SequenceStatus.RUNNING
                for i, block_id in enumerate(seq.block_table):
                    block = bm.blocks[block_id]
                    if block.block_hash is not None:
                        assert (i + 1) * bm.block_size <= seq.num_computed_tokens
                        assert block.token_ids == tuple(seq.token_ids[i * bm.block_size : (i + 1) * bm.block_size])
            else:
                assert not seq.block_table and seq.num_computed_tokens == 0
                assert seq.status is (SequenceStatus.WAITING if seq in sched.waiting else SequenceStatus.FINISHED)
            assert seq.num_output_tokens <= seq.params.max_tokens


@cache
def reference_output(prompt: tuple[int, ...], max_tokens: int, block_size: int = 4) -> tuple[int, ...]:
    """The request run alone, with a pool and a budget far larger than it needs."""
    h = Harness(num_blocks=1000, block_size=block_size, max_num_seqs=1, max_num_batched_tokens=10_000)
    seq = h.add(list(prompt), max_tokens)
    h.run([], max_steps=max_tokens + 1)
    assert seq.finish_reason is FinishReason.LENGTH and h.num_preempted == 0
    return tuple(seq.output_ids)


def assert_outputs_match_reference(h: Harness) -> None:
    for seq in h.seqs:
        if seq not in h.dropped:
            assert tuple(seq.output_ids) == reference_output(tuple(seq.token_ids[: seq.num_prompt_tokens]),
                                                             seq.params.max_tokens)


def prompt_of(length: int, salt: int) -> list[int]:
    return [(salt * 31 + 7 * i + i * i) % 50 for i in range(length)]


# -- unit tests --------------------------------------------------------------------------------------
def test_reference_is_the_model_iterated():
    prompt = prompt_of(9, 1)
    ids = list(prompt)
    for _ in range(6):
        ids.append(next_token(ids))
    assert reference_output(tuple(prompt), 6) == tuple(ids[9:])
    assert reference_output(tuple(prompt), 6, block_size=1) == tuple(ids[9:])


def test_token_budget_and_max_num_seqs_hold_every_step():
    h = Harness(num_blocks=200, block_size=4, max_num_seqs=3, max_num_batched_tokens=16)
    requests = [Request(prompt_of(n, n), m) for n, m in [(3, 9), (40, 4), (11, 7), (25, 3), (5, 12), (17, 6)]]
    h.run(requests, max_steps=300)
    assert max(b.num_tokens for b in h.batches) == 16  # the budget binds...
    assert max(len(b.seqs) for b in h.batches) == 3  # ...and so does the sequence limit
    assert all(b.num_tokens <= 16 and len(b.seqs) <= 3 for b in h.batches)
    assert all(s.finish_reason is FinishReason.LENGTH and s.num_output_tokens == s.params.max_tokens for s in h.seqs)
    assert_outputs_match_reference(h)


def test_long_prompt_is_chunked_while_a_running_decode_gets_a_token_every_step():
    h = Harness(num_blocks=100, block_size=4, max_num_seqs=4, max_num_batched_tokens=8)
    a = h.add(prompt_of(4, 1), max_tokens=30)
    h.step()
    assert a.num_output_tokens == 1
    b = h.add(prompt_of(40, 2), max_tokens=3)
    chunks = []
    while b.num_output_tokens == 0:
        num_out = a.num_output_tokens
        batch = h.step()
        assert batch.seqs[0] is a and batch.num_new_tokens[0] == 1  # the decode goes first, one token
        assert a.num_output_tokens == num_out + 1
        chunks.append(dict(zip(map(id, batch.seqs), batch.num_new_tokens))[id(b)])
    assert chunks == [7, 7, 7, 7, 7, 5]  # 40 prompt tokens in budget-sized chunks (8 minus the decode)
    assert b.num_computed_tokens == 40 and b.num_output_tokens == 1
    batch = h.step()
    assert batch.is_decode and len(batch.seqs) == 2
    h.run([], max_steps=100)
    assert_outputs_match_reference(h)


def test_continuous_batching_a_request_joins_at_the_next_step():
    h = Harness(num_blocks=100, block_size=4, max_num_seqs=4, max_num_batched_tokens=64)
    a = h.add(prompt_of(6, 3), max_tokens=20)
    for _ in range(3):
        assert h.step().seqs == [a]
    b = h.add(prompt_of(10, 4), max_tokens=5)
    batch = h.step()
    assert batch.seqs == [a, b] and batch.num_new_tokens == [1, 10]
    assert b.num_output_tokens == 1  # its whole prompt fit in this step: its first token came at once
    c = h.add(prompt_of(3, 5), max_tokens=2)
    assert h.step().seqs == [a, b, c]
    h.run([], max_steps=100)
    assert [s.num_output_tokens for s in (a, b, c)] == [20, 5, 2]
    assert_outputs_match_reference(h)


@pytest.mark.parametrize("first_still_running", [False, True])
def test_prefix_hit_for_a_second_request(first_still_running):
    h = Harness(num_blocks=100, block_size=4, max_num_seqs=4, max_num_batched_tokens=64)
    a = h.add(prompt_of(22, 6), max_tokens=10)
    if first_still_running:
        h.step()
        h.step()
    else:
        h.run([], max_steps=50)
    b = h.add(a.token_ids[:16] + [49, 48, 47], max_tokens=4)
    batch = h.step()
    assert b.num_cached_tokens == 16 and h.sched.lookups[-1] == (19, 16, 0)
    assert dict(zip(map(id, batch.seqs), batch.num_new_tokens))[id(b)] == 3  # only the uncached suffix
    if first_still_running:
        assert b.block_table[:4] == a.block_table[:4]
        assert all(h.bm.blocks[i].ref_count == 2 for i in b.block_table[:4])
    h.run([], max_steps=50)
    assert_outputs_match_reference(h)
    # the next turn of a finished chat reuses everything it computed, generated tokens included
    c = h.add(a.token_ids + [1, 2], max_tokens=2)
    h.step()
    assert c.num_cached_tokens == 4 * ((a.num_tokens - 1) // 4) == 28
    h.run([], max_steps=50)
    assert_outputs_match_reference(h)


def test_prefix_caching_disabled_never_reuses():
    h = Harness(num_blocks=100, block_size=4, max_num_seqs=4, max_num_batched_tokens=64, enable_prefix_caching=False)
    a = h.add(prompt_of(22, 6), max_tokens=3)
    h.run([], max_steps=50)
    b = h.add(a.token_ids, max_tokens=3)
    h.run([], max_steps=50)
    assert b.num_cached_tokens == 0 and h.sched.lookups == [(22, 0, 0), (25, 0, 0)]
    assert_outputs_match_reference(h)


@pytest.mark.parametrize("budget", [64, 5])
def test_preemption_under_a_tiny_pool_keeps_outputs_and_terminates(budget):
    h = Harness(num_blocks=6, block_size=4, max_num_seqs=3, max_num_batched_tokens=budget)
    requests = [Request(prompt_of(6, k), max_tokens=12) for k in range(3)]  # each needs 5 of the 6 blocks at the end
    num_steps = h.run(requests, max_steps=sum(len(r.prompt) + r.max_tokens for r in requests) + 1)
    assert h.num_preempted > 0 and sum(s.num_preemptions for s in h.seqs) == h.num_preempted
    assert not h.dropped and num_steps > 0
    assert_outputs_match_reference(h)
    assert h.bm.num_used_blocks == 0
    h.bm.check_invariants()


@pytest.mark.parametrize("budget", [64, 8])
def test_a_request_larger_than_the_pool_is_dropped_and_others_are_unaffected(budget):
    h = Harness(num_blocks=6, block_size=4, max_num_seqs=3, max_num_batched_tokens=budget)
    requests = [
        Request(prompt_of(7, 1), max_tokens=6),
        Request(prompt_of(30, 2), max_tokens=3, arrival=1),  # 30 tokens > 6 blocks x 4: can never fit
        Request(prompt_of(5, 3), max_tokens=6, arrival=1),
        Request(prompt_of(20, 4), max_tokens=10, arrival=2),  # its prompt fits, but it outgrows the pool
    ]
    h.run(requests, max_steps=200)
    huge, grows = h.seqs[1], h.seqs[3]
    assert h.dropped == [huge, grows] or h.dropped == [grows, huge]
    for seq in (huge, grows):
        assert seq.finish_reason is FinishReason.LENGTH and seq.is_finished
    assert huge.output_ids == []
    assert grows.num_tokens == 6 * 4 + 1  # dropped when its 25th token needed a 7th block
    assert tuple(grows.output_ids) == reference_output(tuple(grows.token_ids[:20]), 10)[: grows.num_output_tokens]
    assert [s.num_output_tokens for s in (h.seqs[0], h.seqs[2])] == [6, 6]
    assert_outputs_match_reference(h)


def test_finish_of_a_waiting_or_a_half_prefilled_request_frees_its_blocks():
    h = Harness(num_blocks=20, block_size=4, max_num_seqs=1, max_num_batched_tokens=8)
    a = h.add(prompt_of(30, 1), max_tokens=4)
    b = h.add(prompt_of(5, 2), max_tokens=4)
    h.step()
    assert a.num_computed_tokens == 8 and b in h.sched.waiting  # max_num_seqs 1: b waits
    h.sched.finish(b, FinishReason.ABORT)
    h.sched.finish(a, FinishReason.ABORT)
    assert not h.sched.has_work and h.bm.num_used_blocks == 0
    assert a.finish_reason is b.finish_reason is FinishReason.ABORT
    h.bm.check_invariants()


# -- the property ------------------------------------------------------------------------------------
@st.composite
def workloads(draw):
    block_size = draw(st.integers(1, 4))
    requests: list[Request] = []
    for _ in range(draw(st.integers(1, 6))):
        prompt: list[int] = []
        if requests and draw(st.booleans()):  # share a prefix with an earlier prompt: prefix hits happen
            earlier = draw(st.sampled_from(requests)).prompt
            prompt = earlier[: draw(st.integers(1, len(earlier)))]
        prompt += draw(st.lists(st.integers(0, 3), min_size=0 if prompt else 1, max_size=16))
        requests.append(Request(prompt, draw(st.integers(1, 8)), arrival=draw(st.integers(0, 5))))
    # a pool around the size of the largest request: some never fit, most fit alone but not all together
    largest = max(-(-(len(r.prompt) + r.max_tokens - 1) // block_size) for r in requests)
    num_blocks = max(1, largest + draw(st.integers(-2, 6)))
    max_num_seqs, budget = draw(st.integers(1, 4)), draw(st.integers(1, 24))
    return block_size, num_blocks, max_num_seqs, budget, draw(st.sampled_from([True, True, False])), requests


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_any_workload_gives_the_run_alone_outputs(workload):
    block_size, num_blocks, max_num_seqs, budget, caching, requests = workload
    h = Harness(num_blocks, block_size, max_num_seqs, budget, enable_prefix_caching=caching)
    # liveness: the oldest running request gains >= 1 token every step and is never preempted
    bound = max(r.arrival for r in requests) + sum(len(r.prompt) + r.max_tokens for r in requests) + 1
    h.run(requests, max_steps=bound)
    by_arrival = sorted(requests, key=lambda r: r.arrival)  # the harness adds them in this order
    for seq, r in zip(h.seqs, by_arrival):
        assert seq.token_ids[: seq.num_prompt_tokens] == r.prompt
        expected = reference_output(tuple(r.prompt), r.max_tokens, block_size)
        never_fits = h.bm.num_blocks_for(len(r.prompt) + r.max_tokens - 1) > num_blocks
        assert (seq in h.dropped) == never_fits
        assert seq.finish_reason is FinishReason.LENGTH
        if never_fits:
            assert tuple(seq.output_ids) == expected[: seq.num_output_tokens]
        else:
            assert tuple(seq.output_ids) == expected
        assert 0 <= seq.num_cached_tokens < len(r.prompt) or (seq in h.dropped and seq.num_cached_tokens == -1)
        assert seq.num_cached_tokens <= 0 or (caching and seq.num_cached_tokens % block_size == 0)
    event(f"preempted: {h.num_preempted > 0}")
    event(f"prefix hit: {any(s.num_cached_tokens > 0 for s in h.seqs)}")
    event(f"dropped: {bool(h.dropped)}")
    h.bm.check_invariants()
    assert h.bm.num_cached_free_blocks + h.bm.num_empty_blocks == num_blocks
