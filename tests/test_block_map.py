"""The block map snapshot (core/inspect/block_map.py) against the block manager, and the engine service's calls:
a call whose caller gave up (a screen closed while waiting) is skipped, the engine thread goes on."""
from __future__ import annotations

from concurrent.futures import Future

from llmchat.core.engine.block_manager import BlockManager
from llmchat.core.inspect.block_map import block_map_of
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.api.metrics import PrefixTiers
from llmchat.core.api.params import SamplingParams
from llmchat.core.engine.sequence import Sequence
from llmchat.core.backends.service import EngineService


def seq(request_id: int, token_ids: list[int]) -> Sequence:
    return Sequence(request_id, token_ids, len(token_ids), SamplingParams(temperature=0))


def test_cells_states_holders_and_lru_match_the_block_manager():
    bm = BlockManager(8, 4, True, b"f")
    a, b = seq(1, list(range(9))), seq(2, list(range(8)) + [99])
    bm.allocate(a, 9)
    a.num_computed_tokens = 9
    bm.cache_full_blocks(a)
    bm.deallocate(a)  # its two full blocks are cached-free (LRU: the tail first), the partial one empty
    bm.allocate(b, 1, bm.lookup(b))  # b revives a's first two blocks and takes one more
    c = seq(3, [7] * 5)
    bm.allocate(c, 5)
    residency = {"A": (0, 1), "B": tuple(b.block_table), "C": tuple(c.block_table)}
    m = block_map_of(bm, residency, stats=None, tiers={"A": PrefixTiers(3, 2, 1)})
    bm.check_invariants()
    assert (m.count("used"), m.count("cached"), m.count("free")) == (
        bm.num_used_blocks, bm.num_cached_free_blocks, bm.num_empty_blocks)
    for cell in m.cells:
        assert cell.ref_count == bm.blocks[cell.block_id].ref_count
    assert [c.block_id for c in m.cells if c.lru_rank is not None] == list(bm.cached_free)
    shared = {c.block_id for c in m.cells if len(c.holders) > 1}
    assert shared == {0, 1} and m.num_shared == 2
    chat_a = next(c for c in m.chats if c.tag == "A")
    assert (chat_a.num_blocks, chat_a.num_shared, chat_a.num_in_use, chat_a.num_disk_only) == (2, 2, 2, 1)


def test_a_call_given_up_by_its_caller_is_skipped(tiny_model):
    service = EngineService(LLMEngine(tiny_model, EngineConfig()))
    try:
        gave_up: Future = Future()
        gave_up.cancel()  # what asyncio.wrap_future does when the awaiting screen is closed
        service._inbox.put(("call", lambda engine: 1, gave_up))
        assert service.block_map().result(10).stats.num_blocks_total == service.stats().num_blocks_total
        done = service.submit_ids(tiny_model.tokenizer.encode("hello"), SamplingParams(temperature=0, max_tokens=3))
        assert done.wait(30) is not None and done.result.metrics.num_output_tokens == 3
    finally:
        service.shutdown()
