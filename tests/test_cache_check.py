"""The exactness check (core/inspect/cache_check.py): a greedy re-run from the prefix cache equals one with the
cache off — on the real model (slow), and a forced divergence (poisoned cached K/V) is reported."""
from __future__ import annotations

import pytest
import torch

from llmchat.core.inspect.cache_check import check_cache, compare_runs
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.model.loader import load_model
from llmchat.core.text.prompt import prompt_ids_for
from llmchat.core.api.params import SamplingParams
from llmchat.core.backends.service import EngineService

SYSTEM = "You are a meticulous assistant for a team of engineers. " * 4


def chat_prompt(tokenizer, question: str) -> list[int]:
    return prompt_ids_for(tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])


def run_check(loaded, poison: bool = False):
    service = EngineService(LLMEngine(loaded, EngineConfig()))
    try:
        prompt = chat_prompt(loaded.tokenizer, "What is the capital of France? Answer in one sentence.")
        first = service.submit_ids(prompt, SamplingParams(temperature=0, max_tokens=24), tag=1).wait(120)
        assert first.metrics.num_output_tokens > 0
        if poison:  # scale the cached K of the prompt's first block in every layer: reuse is then wrong
            def poison_blocks(engine):
                block_ids = engine.residency()[1][:2]
                for k in engine.kv_cache.k:
                    k[block_ids] = torch.randn_like(k[block_ids]) * 10
            service._call(poison_blocks).result(30)
        tokenizer = loaded.tokenizer
        return check_cache(service.submit_ids, prompt, len(first.output_ids), lambda i: tokenizer.decode([i]), 300)
    finally:
        service.shutdown()


def test_identical_on_a_tiny_model_and_a_forced_divergence_is_reported(chatty_model):
    check = run_check(chatty_model)
    assert check.identical and check.num_tokens == check.num_identical > 0
    assert check.num_cached_tokens >= 16 * 4  # the cached run really reused the prompt's blocks
    poisoned = run_check(chatty_model, poison=True)
    assert not poisoned.identical and poisoned.divergence is not None
    assert poisoned.divergence < poisoned.num_tokens
    assert poisoned.cached_token != poisoned.uncached_token


def test_compare_runs_positions():
    text = str
    assert compare_runs((1, 2, 3), (1, 2, 3), 10, 8, text).identical
    c = compare_runs((1, 2, 3), (1, 5, 3), 10, 8, text)
    assert (c.divergence, c.num_identical, c.cached_token, c.uncached_token) == (1, 1, "2", "5")
    c = compare_runs((1, 2), (1, 2, 3), 10, 8, text)  # one run stopped early
    assert not c.identical and c.divergence == 2 and c.cached_token is None and c.uncached_token == "3"


@pytest.mark.slow
def test_identical_on_the_real_model(default_model_dir):
    check = run_check(load_model(default_model_dir, weight_dtype="float32"))
    assert check.identical and check.num_tokens > 4, check
    assert check.num_cached_tokens >= 16 * 4
