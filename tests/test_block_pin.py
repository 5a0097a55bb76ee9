"""core/engine/block_manager.py pinning: a pinned chat's blocks survive a flood of other chats that evicts
every unpinned cached block; the pin budget caps how many hashes are pinned; unpin returns them to the LRU;
the block map marks pinned blocks and ranks them after every unpinned one."""
from __future__ import annotations

from llmchat.core.api.params import SamplingParams
from llmchat.core.engine.block_manager import BlockManager
from llmchat.core.engine.sequence import Sequence
from llmchat.core.inspect.block_map import block_map_of

PARAMS = SamplingParams(temperature=0.0, max_tokens=16)
BS = 4


def run_chat(bm: BlockManager, token_ids: list[int], request_id: int) -> Sequence:
    """Admit, compute and finish one request: its full blocks end cached-free."""
    seq = Sequence(request_id, list(token_ids), len(token_ids), PARAMS)
    cached = bm.lookup(seq)
    assert bm.allocate(seq, seq.num_tokens - len(cached) * BS, cached)
    seq.num_computed_tokens = seq.num_tokens
    bm.cache_full_blocks(seq)
    bm.deallocate(seq)
    bm.check_invariants()
    return seq


def flood(bm: BlockManager, num_chats: int, first_id: int = 1000) -> None:
    for k in range(num_chats):
        run_chat(bm, [first_id + 10 * k + j for j in range(3 * BS + 1)], first_id + k)


def num_hits(bm: BlockManager, token_ids: list[int]) -> int:
    return len(bm.lookup(Sequence(99, list(token_ids) + [7], len(token_ids) + 1, PARAMS)))


def test_pinned_chat_survives_a_flood_that_evicts_everything_else():
    bm = BlockManager(16, BS)  # budget: 16 // 4 = 4 blocks
    pinned_ids, other_ids = list(range(1, 3 * BS + 1)), list(range(100, 100 + 3 * BS))
    pinned = run_chat(bm, pinned_ids, 1)
    run_chat(bm, other_ids, 2)
    assert bm.pin(pinned.block_hashes) == 3
    bm.check_invariants()
    flood(bm, 12)  # 12 chats x 4 blocks through a 16-block pool
    assert num_hits(bm, other_ids) == 0  # the unpinned chat is gone
    assert num_hits(bm, pinned_ids) == 3  # the pinned chat is whole
    assert bm.num_evictions > 0


def test_unpin_returns_blocks_to_the_lru():
    bm = BlockManager(16, BS)
    pinned_ids = list(range(1, 3 * BS + 1))
    pinned = run_chat(bm, pinned_ids, 1)
    bm.pin(pinned.block_hashes)
    flood(bm, 6)
    assert num_hits(bm, pinned_ids) == 3
    bm.unpin(pinned.block_hashes)
    assert not bm.pinned_free and not bm.pinned_hashes
    bm.check_invariants()
    flood(bm, 12, first_id=5000)
    assert num_hits(bm, pinned_ids) == 0


def test_pin_budget_caps_the_pinned_hashes():
    bm = BlockManager(16, BS, pin_budget_blocks=2)
    seq = run_chat(bm, list(range(1, 3 * BS + 1)), 1)
    assert bm.pin(seq.block_hashes) == 2
    assert len(bm.pinned_hashes) == 2 and len(bm.pinned_free) == 2
    bm.check_invariants()


def test_pinned_blocks_are_evicted_last_when_nothing_else_is_left():
    bm = BlockManager(4, BS, pin_budget_blocks=4)
    seq = run_chat(bm, list(range(1, 3 * BS + 1)), 1)
    bm.pin(seq.block_hashes)
    big = Sequence(2, list(range(200, 200 + 4 * BS)), 4 * BS, PARAMS)
    assert bm.allocate(big, 4 * BS)  # needs the whole pool: pins give way rather than refuse a real turn
    bm.check_invariants()


def test_a_pinned_block_revived_by_a_hit_and_released_goes_back_to_pinned():
    bm = BlockManager(16, BS)
    ids = list(range(1, 3 * BS + 1))
    seq = run_chat(bm, ids, 1)
    bm.pin(seq.block_hashes)
    run_chat(bm, ids + [50, 51], 2)  # revives the pinned blocks, then releases them
    assert len(bm.pinned_free) == 3
    bm.check_invariants()


def test_block_map_marks_pinned_blocks_and_ranks_them_last():
    bm = BlockManager(16, BS)
    pinned = run_chat(bm, list(range(1, 3 * BS + 1)), 1)
    bm.pin(pinned.block_hashes)
    run_chat(bm, list(range(100, 100 + 3 * BS)), 2)
    cells = block_map_of(bm, {}, stats=None).cells
    pinned_cells = [c for c in cells if c.pinned]
    others = [c for c in cells if c.state == "cached" and not c.pinned]
    assert len(pinned_cells) == 3 and len(others) == 3
    assert min(c.lru_rank for c in pinned_cells) > max(c.lru_rank for c in others)


def test_a_pinned_conversation_stays_pinned_as_its_chain_grows_and_unpin_releases_it():
    from llmchat.core.engine.chains import ConversationChains

    bm = BlockManager(32, BS)
    chains = ConversationChains(bm, lambda: None)
    first = run_chat(bm, list(range(1, 2 * BS + 1)), 1)
    chains.remember("chat", first.block_hashes)
    assert chains.pin("chat", True) == (2, 2)
    longer = run_chat(bm, list(range(1, 4 * BS + 1)), 2)  # the next turn: the same head, two more blocks
    chains.remember("chat", longer.block_hashes)
    assert bm.pinned_hashes == set(longer.block_hashes) and len(bm.pinned_free) == 4
    assert chains.pin("chat", False) == (0, 4)
    assert not bm.pinned_hashes and not bm.pinned_free
    bm.check_invariants()
