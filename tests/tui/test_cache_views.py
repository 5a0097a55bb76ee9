"""Pilot tests of the cache views: Verify cache (F5) in the background while another chat streams, and a
forced divergence; the block map (F8) counts against EngineStats of the same moment while chats stream;
the misconceptions screen (F1) with live numbers."""
from __future__ import annotations

import asyncio
import re
from dataclasses import replace

import torch
from tui_helpers import SIZE, capture, one_turn, press, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.tui.screens.block_map import BlockMapScreen
from llmchat.tui.screens.misconceptions import facts_text

SYSTEM = "You are a meticulous assistant for a team of engineers. " * 6
SETTINGS = ChatSettings(SYSTEM, 0.7, 1.0, 12)  # sampled: the check itself runs greedily, twice


def banner(app) -> str:
    return str(app.chat_screen.query_one("#banner").render())


async def start_long_reply(pilot, text: str) -> None:
    app = pilot.app
    await press(pilot, "ctrl+n")
    await wait_for(pilot, lambda: not app.current.conversation.messages)
    chat = app.current
    settings = ChatSettings(SYSTEM, 0.0, 1.0, 600)
    app.store.update_settings(chat.chat_id, settings)
    chat.conversation.settings = settings
    app.chat_screen.prompt.load_text(text)
    await press(pilot, "enter")
    await wait_for(pilot, lambda: chat.turn is not None and chat.turn.num_output_tokens >= 2)


async def test_verify_cache_identical_then_a_forced_divergence(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "What is a KV cache?", SETTINGS)
        checked = app.current
        await start_long_reply(pilot, "Meanwhile, a long story")  # another chat streams during the check
        other = app.current
        await app.open_chat(checked.chat_id)
        await press(pilot, "f5")
        await wait_for(pilot, lambda: checked.chat_id in app.cache_checks, timeout=60)
        check = app.cache_checks.pop(checked.chat_id)
        assert other.busy, "the check ran while the other chat kept streaming"
        reply = checked.conversation.messages[-1]
        assert check.identical and check.num_tokens == reply.token_span[1] - reply.token_span[0]
        assert check.num_cached_tokens >= 16 * 4
        await wait_for(pilot, lambda: f"identical: {check.num_tokens} of {check.num_tokens} tokens" in banner(app))
        capture(app, "verify_cache_identical")

        def poison(engine):  # overwrite the cached K/V of this chat's first blocks: a wrong cache
            for cache in (engine.kv_cache.k, engine.kv_cache.v):
                for layer in cache:
                    block_ids = list(engine.residency()[checked.chat_id][:4])
                    layer[block_ids] = torch.randn_like(layer[block_ids]) * 10
        await asyncio.wrap_future(app.bridge.service._call(poison))
        await press(pilot, "f5")
        await wait_for(pilot, lambda: checked.chat_id in app.cache_checks, timeout=60)
        bad = app.cache_checks[checked.chat_id]
        assert not bad.identical and bad.divergence is not None and bad.cached_token != bad.uncached_token
        await wait_for(pilot, lambda: f"DIFFERENT at token {bad.divergence}" in banner(app))
        app.turns.cancel(other)
        await wait_for(pilot, lambda: not other.busy)


async def test_block_map_counts_equal_engine_stats_while_chats_stream(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "A finished chat", ChatSettings(SYSTEM, 0.0, 1.0, 20))
        await start_long_reply(pilot, "First long reply")
        await start_long_reply(pilot, "Second long reply")
        await press(pilot, "f8")
        await wait_for(pilot, lambda: isinstance(app.screen, BlockMapScreen) and app.screen.block_map is not None)
        screen = app.screen
        seen = set()
        for _ in range(3):  # successive refreshes while both stream
            await wait_for(pilot, lambda: screen.block_map is not None and id(screen.block_map) not in seen)
            block_map = screen.block_map
            seen.add(id(block_map))
            s = block_map.stats
            assert (block_map.count("used"), block_map.count("cached"), block_map.count("free")) == (
                s.num_blocks_used, s.num_blocks_cached_free, s.num_blocks_free)
            assert len(block_map.cells) == s.num_blocks_total
            text = screen_text(app)
            assert f"used {s.num_blocks_used} · cached {s.num_blocks_cached_free} · free {s.num_blocks_free}" in text
        shared = [c for c in block_map.cells if len(c.holders) == 3]  # the system prompt's blocks: all three chats
        assert len(shared) >= 4 and "+" in screen_text(app)
        await press(pilot, "escape")
        for s in app.sessions.values():
            app.turns.cancel(s)
        await wait_for(pilot, lambda: not any(s.busy for s in app.sessions.values()))


async def test_misconceptions_screen_shows_live_numbers(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "Tell me something", ChatSettings(SYSTEM, 0.0, 1.0, 24))
        await press(pilot, "f1")
        await wait_for(pilot, lambda: "GQA shrinks the cache" in screen_text(app), timeout=60)
        facts = app.screen.facts
        text = screen_text(app)
        kv = facts.kv_bytes_per_token
        assert kv == 2 * 2 * 2 * 16 * 4 and facts.kv_bytes_per_token_without_gqa == 2 * kv  # tiny: 4 q / 2 kv heads
        assert "2 layers × 2 (K, V) × 2 KV heads × 16 dims × 4 bytes = 512 B" in text
        assert "it would be 1.0 KiB: GQA shrinks the cache 2×" in text
        assert facts.copy_gb_s and facts.copy_gb_s > 0 and re.search(r"copies memory at \d", text)
        assert facts.prefill_tokens_per_s > 0 and re.search(r"prefill does \d+(\.\d)? [GT]FLOP/s", text)
        assert facts.batch and facts.batch[0].batch_size == 1 and "1 chat  decoding" in text
        assert "advertises 1,024 tokens; this KV budget holds 8,192 tokens" in text
        assert "Ctrl+G  regenerate" in text and "F6      mark accepted drafts" in text
        assert facts.speculative_tokens == 0 and "Off in this session (--no-speculative)" in text
        on = replace(facts, speculative_tokens=4)
        assert "No drafts verified lately" in facts_text(on, None)
        drafting = replace(on, stats=replace(facts.stats, spec_acceptance_rate=0.75, spec_tokens_per_step=2.5))
        assert "Recently: 75% of drafts kept, 2.50 tokens per chat per decode step" in facts_text(drafting, None)
        capture(app, "misconceptions")
        await press(pilot, "escape")
