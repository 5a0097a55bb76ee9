"""Snapshots of the screen as text (figures that depend on machine speed or the clock masked), plus
assertions on the figures themselves. LLMCHAT_UPDATE_SNAPSHOTS=1 rewrites snapshots/*.txt (and .svg)."""
from __future__ import annotations

import re

from tui_helpers import SIZE, assert_snapshot, one_turn, press, wait_for

from llmchat.core.chats.conversation import ChatSettings

SYSTEM = "You are a meticulous assistant for a team of engineers. " * 6  # ~70 tokens: 4+ full blocks


async def settle(pilot) -> None:
    """Let the 4 Hz panels, the per-chat block query and the repaint catch up."""
    await pilot.pause(1.3)
    await pilot.app.ask_resident_blocks_now()
    await pilot.pause(0.4)


async def test_empty_app(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await settle(pilot)
        text = assert_snapshot(app, "empty_app")
        assert "Type a message below and press Enter" in text and "New chat" in text
        assert "used 0 · cached 0 · free 512" in text and "of 512 blocks × 16 tokens" in text


async def test_streamed_reply_with_panels(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "What is a KV cache?", ChatSettings(None, 0.0, 1.0, 24))
        await settle(pilot)
        text = assert_snapshot(app, "streamed_reply")
        m = app.current.conversation.messages[-1].metrics
        assert m.num_output_tokens == 24 and m.num_cached_tokens == 0
        assert f"reused 0 of {m.num_prompt_tokens} prompt tokens" in text
        assert re.search(r"TTFT \d+(\.\d+)? (ms|s) · queue \+ prefill", text)  # format.seconds: ms below 1 s
        assert re.search(r"TPOT \d+\.\d ms · one decode step", text)
        assert re.search(r"decode \d+(\.\d)? tok/s · reads \d+(\.\d)? GB/s", text)
        assert "24 tokens · reused 0 of" in text  # the line under the reply


async def test_kv_panel_with_two_chats_sharing_a_prefix(make_app):
    app = make_app()
    settings = ChatSettings(SYSTEM, 0.0, 1.0, 8)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "First chat, first question", settings)
        first = app.current
        await press(pilot, "ctrl+n")
        await one_turn(pilot, "Second chat asks something else", settings)
        second = app.current
        await settle(pilot)
        text = assert_snapshot(app, "kv_two_chats_sharing")
        a, b = first.conversation.token_ids, second.conversation.token_ids
        common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        shared = common // 16
        assert shared >= 4
        assert set(app.resident[first.chat_id]) & set(app.resident[second.chat_id]) == set(
            app.resident[first.chat_id][:shared])
        for s in (first, second):
            blocks = (len(s.conversation.token_ids) - 1) // 16
            assert re.search(rf"#{s.chat_id} +\S.*? +{blocks} · +{shared}\b", text), s.chat_id
        # the second chat's prompt reused the first chat's system-prompt blocks
        m = second.conversation.messages[-1].metrics
        assert m.num_cached_tokens == shared * 16
        assert f"reused {m.num_cached_tokens} of {m.num_prompt_tokens} prompt tokens" in text
