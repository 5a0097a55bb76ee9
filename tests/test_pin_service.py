"""EngineService.pin end to end on the tiny model: a pinned chat's prefix survives a flood of other chats through a
small KV cache (its next turn reuses it), an unpinned one is evicted; unpinning returns the blocks to the LRU."""
from __future__ import annotations

from llmchat.core.api.params import SamplingParams
from llmchat.core.backends.service import EngineService
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine

PARAMS = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)


def prompt(k: int, n: int = 64) -> list[int]:
    return [100 + (k * 7919 + j * 31) % 4000 for j in range(n)]


def cached_tokens(service: EngineService, ids: list[int], tag: int) -> int:
    finished = service.submit_ids(ids, PARAMS, tag=tag).wait(120)
    assert finished is not None and finished.error is None
    return finished.metrics.num_cached_tokens


def test_a_pinned_chat_survives_a_flood_and_unpin_returns_it_to_the_lru(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(max_num_seqs=1, block_size=16, kv_cache_bytes=1 << 20))
    service = EngineService(engine)
    try:
        num_blocks = engine.block_manager.num_blocks
        assert engine.block_manager.pin_budget_blocks == int(num_blocks * 0.25)
        cached_tokens(service, prompt(0), tag=1)
        cached_tokens(service, prompt(1), tag=2)
        assert service.pin(1).result(60) == (4, 4)
        for k in range(2, 2 + 2 * num_blocks // 4):  # floods the whole pool twice over
            cached_tokens(service, prompt(k), tag=100 + k)
        assert cached_tokens(service, prompt(1), tag=2) == 0  # the unpinned chat was evicted
        assert cached_tokens(service, prompt(0), tag=1) == 48  # the pinned one: all but its last block
        cells = service.block_map().result(60).cells
        assert sum(c.pinned for c in cells) == 4
        assert service.pin(1, False).result(60) == (0, 4)
        for k in range(200, 200 + 2 * num_blocks // 4):
            cached_tokens(service, prompt(k), tag=100 + k)
        assert cached_tokens(service, prompt(0), tag=1) == 0
    finally:
        service.shutdown()
