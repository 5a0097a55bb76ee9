"""One bad request hurts only itself (issue 26, item 5): a row that cannot be sampled (NaN logits, a probability
vector summing to 0) ends its own request with an error; the batch goes on. A state machine over submit, cancel,
step, injected step failures and disk-tier faults keeps the block accounting and the one-Finished-per-request
rule."""
from __future__ import annotations

import errno
import os
import tempfile
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from llmchat.core.api.events import Finished
from llmchat.core.api.params import SamplingParams
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.engine.sequence import FinishReason
from llmchat.core.kvdisk.folder import TEMP_SUFFIX, entry_path
from llmchat.core.model import sampling

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
BLOCK_BYTES_TINY = 2 * 2 * 2 * 16 * 4 * 16  # layers * (K, V) * kv heads * head dim * fp32 * block size


def tiny_engine(loaded, disk_dir: Path | None = None, num_blocks: int = 64) -> LLMEngine:
    return LLMEngine(loaded, EngineConfig(kv_cache_bytes=num_blocks * BLOCK_BYTES_TINY, max_num_batched_tokens=64,
                                          kv_disk_bytes=(1 << 24) if disk_dir else 0,
                                          kv_disk_dir=str(disk_dir) if disk_dir else None))


def drain(engine: LLMEngine) -> dict[int, Finished]:
    done: dict[int, Finished] = {}
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, Finished):
                assert event.request_id not in done
                done[event.request_id] = event
    return done


def nan_row_of(model, row: int):
    """compute_logits with one row of NaN (a numerical failure in one sequence), once."""
    real = model.compute_logits
    calls = []

    def damaged(hidden):
        logits = real(hidden)
        if not calls and logits.shape[0] > row:
            calls.append(row)
            logits = logits.clone()
            logits[row] = float("nan")
        return logits
    return damaged


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_nan_row_ends_only_its_request(tiny_model, temperature):
    prompts = [list(range(100, 120)), list(range(300, 331))]
    params = SamplingParams(temperature=temperature, max_tokens=12, ignore_eos=True, seed=7)
    alone = tiny_engine(tiny_model)
    alone.add_request(prompts[1], params)
    expected = drain(alone)[1].output_ids

    engine = tiny_engine(tiny_model)
    first, second = (engine.add_request(p, params) for p in prompts)
    with mock.patch.object(engine.runner.model, "compute_logits", nan_row_of(engine.runner.model, 0)):
        done = drain(engine)
    assert done[first].reason is FinishReason.ERROR and "no finite logits" in done[first].error
    assert done[second].reason is FinishReason.LENGTH and done[second].error is None
    assert done[second].output_ids == expected, "the other reply is the one it gives alone"
    assert engine.block_manager.num_used_blocks == 0
    engine.block_manager.check_invariants()


def test_a_probability_vector_summing_to_0_ends_only_its_request(tiny_model):
    engine = tiny_engine(tiny_model)
    sampled = engine.add_request(list(range(100, 120)), SamplingParams(temperature=0.8, max_tokens=8, seed=1))
    greedy = engine.add_request(list(range(200, 220)), GREEDY)
    with mock.patch.object(sampling, "filtered_probs", lambda logits, params: torch.zeros(logits.shape[-1])):
        done = drain(engine)
    assert done[sampled].reason is FinishReason.ERROR and "sampling failed" in done[sampled].error
    assert done[greedy].reason is FinishReason.LENGTH and len(done[greedy].output_ids) == 12
    assert engine.block_manager.num_used_blocks == 0


def test_a_greedy_row_with_some_nan_ignores_them():
    logits = torch.tensor([[0.0, float("nan"), 2.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    assert sampling.sample_each(logits, [SamplingParams(temperature=0)] * 2, [None, None]) == [2, 0]
    assert sampling.sample(torch.tensor([[1.0, 3.0]]), [SamplingParams(temperature=0)], [None]) == [1]


class DiskFaults:
    """Faults of the disk tier, switched on by the state machine: writes that raise, entries that vanish or
    are cut short while they are read."""

    def __init__(self, store):
        self.store = store
        self.kind: str | None = None
        self.real_write, self.real_read = store._write, store.read
        store._write, store.read = self.write, self.read

    def write(self, key, payload):
        if self.kind in ("ENOSPC", "EROFS", "EIO"):
            raise OSError(getattr(errno, self.kind), os.strerror(getattr(errno, self.kind)))
        return self.real_write(key, payload)

    def read(self, key):
        path = entry_path(self.store.root, key.block_hash)
        if self.kind == "delete" and path.exists():
            path.unlink()
        elif self.kind == "truncate" and path.exists():
            os.truncate(path, path.stat().st_size // 2)
        return self.real_read(key)


class EngineUnderFaults(RuleBasedStateMachine):
    loaded = None

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="llmchat-faults-"))
        self.engine = tiny_engine(self.loaded, self.dir, num_blocks=12)  # small: preemption and drops happen
        self.faults = DiskFaults(self.engine.kv_disk.store)
        self.submitted: list[int] = []
        self.finished: Counter[int] = Counter()

    def _take(self, events) -> None:
        for event in events:
            assert self.finished[event.request_id] == 0, "no event after a request's Finished"
            if isinstance(event, Finished):
                self.finished[event.request_id] += 1

    @rule(length=st.integers(1, 70), shared=st.integers(0, 40), max_tokens=st.integers(1, 20),
          temperature=st.sampled_from([0.0, 0.9]), seed=st.integers(0, 99))
    def submit(self, length, shared, max_tokens, temperature, seed):
        prompt = list(range(500, 500 + min(shared, length))) + [1000 + (seed * 7 + i) % 3000 for i in range(length - shared)]
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed, ignore_eos=True)
        self.submitted.append(self.engine.add_request(prompt, params))

    @precondition(lambda self: self.submitted)
    @rule(pick=st.integers(0, 1000))
    def cancel(self, pick):
        self.engine.abort(self.submitted[pick % len(self.submitted)])

    @rule(kind=st.sampled_from([None, "ENOSPC", "EROFS", "EIO", "delete", "truncate"]))
    def disk_fault(self, kind):
        self.faults.kind = kind

    @rule(fault=st.sampled_from([None, None, "nan_row", "zero_probs", "raise"]), row=st.integers(0, 5))
    def step(self, fault, row):
        model = self.engine.runner.model
        patches = {
            None: mock.patch.object(sampling, "NO_FINITE_LOGITS", sampling.NO_FINITE_LOGITS),  # a no-op
            "nan_row": mock.patch.object(model, "compute_logits", nan_row_of(model, row)),
            "zero_probs": mock.patch.object(sampling, "filtered_probs", lambda logits, p: torch.zeros(logits.shape[-1])),
            "raise": mock.patch.object(self.engine.runner, "run", side_effect=RuntimeError("injected step failure")),
        }
        with patches[fault]:
            try:
                self._take(self.engine.step())
            except RuntimeError as e:  # what core/backends/service.py does when a step raises
                assert fault == "raise"
                self.engine.recover(f"internal engine error: {e}")

    @invariant()
    def blocks_in_use_are_the_live_requests_blocks(self):
        bm = self.engine.block_manager
        bm.check_invariants()
        live = {b for seq in (*self.engine.scheduler.running, *self.engine.scheduler.waiting) for b in seq.block_table}
        assert bm.num_used_blocks == len(live)
        assert all(n <= 1 for n in self.finished.values())

    def teardown(self):
        self.faults.kind = None
        try:
            while self.engine.has_work:
                self._take(self.engine.step())
            assert all(self.finished[r] == 1 for r in self.submitted), "every request saw exactly one Finished"
            assert self.engine.block_manager.num_used_blocks == 0, "at the end all blocks are free"
            store = self.engine.kv_disk.store
            self.engine.close()
            assert store.stats().num_bytes <= store.budget_bytes
            assert not list(self.dir.rglob(f"*{TEMP_SUFFIX}")), "no temp file left"
        finally:
            for path in sorted(self.dir.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            self.dir.rmdir()


def test_engine_state_machine_under_faults(tiny_model):
    EngineUnderFaults.loaded = tiny_model
    run_state_machine_as_test(EngineUnderFaults, settings=settings(
        max_examples=20, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)))
