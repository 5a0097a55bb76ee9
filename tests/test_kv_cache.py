"""The paged KV cache is allocated with torch.empty: unwritten slots hold garbage, which must never matter."""
from __future__ import annotations

import torch

from llmchat.core.config import EngineConfig
from llmchat.core.model.dense import generate_dense
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.api.events import Finished
from llmchat.core.api.params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def test_nan_in_unwritten_kv_slots_never_reaches_the_output(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(kv_cache_bytes=64 * tiny_model.config.kv_bytes_per_token(4) * 16))
    for t in engine.kv_cache.k + engine.kv_cache.v:
        t.fill_(float("nan"))  # what an uninitialised page may hold, at worst
    prompts = [list(range(5, 5 + n)) for n in (3, 17, 40, 9)]  # unequal lengths: padded block tables, stale tails
    ids = [engine.add_request(p, GREEDY) for p in prompts]
    done = {}
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, Finished):
                done[event.request_id] = event
    expected = [tuple(generate_dense(tiny_model.model, p, GREEDY)) for p in prompts]
    assert [tuple(done[i].output_ids) for i in ids] == expected


def test_kv_budget_is_not_zero_filled(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(kv_cache_bytes=1 << 20))
    assert engine.kv_cache.num_blocks > 0
    assert all(t.dtype == tiny_model.model.dtype for t in engine.kv_cache.k)
