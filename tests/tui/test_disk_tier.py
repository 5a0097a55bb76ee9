"""The disk tier as a user sees it: after quitting and starting again, an old chat's KV is on disk (KV panel),
and its next turn says how much came from disk (the reply's line and the Prompt panel)."""
from __future__ import annotations

import re

from textual.widgets import Static
from tui_helpers import SIZE, one_turn, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.tui.app import LlmChatApp

SYSTEM = "You are a meticulous assistant for a team of engineers. " * 6  # ~70 tokens: 4+ full blocks


async def test_an_old_chat_after_a_restart_is_on_disk_and_its_next_turn_reuses_it(chatty_model, tmp_path):
    def factory(progress, sink):
        from llmchat.core.config import EngineConfig
        from llmchat.core.engine.engine import LLMEngine
        from llmchat.core.backends.service import EngineService

        config = EngineConfig(max_num_seqs=8, kv_cache_bytes=4 << 20, kv_disk_bytes=1 << 30,
                              kv_disk_dir=str(tmp_path / "kv"))
        return EngineService(LLMEngine(chatty_model, config), sink)

    settings = ChatSettings(SYSTEM, 0.0, 1.0, 8)
    app = LlmChatApp(tmp_path / "data", factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await one_turn(pilot, "A first question", settings)
        chat_id = app.current.chat_id
        num_blocks = len(app.current.conversation.token_ids) // 16
    app = LlmChatApp(tmp_path / "data", factory)  # quit and start again: the paged cache is empty
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        await wait_for(pilot, lambda: chat_id in app.prefix_tiers)
        tiers = app.prefix_tiers[chat_id]
        assert (tiers.num_blocks, tiers.num_resident, tiers.num_disk_only) == (num_blocks, 0, num_blocks)
        app.show_engine_panels()
        await pilot.pause(0.2)
        kv_chats = str(app.chat_screen.query_one("#kv-chats", Static).content)  # (below the fold at this size)
        assert re.search(rf"#{chat_id} .*? +0 · +0 · +{num_blocks} · +0$", kv_chats, re.M), kv_chats
        await one_turn(pilot, "And a second one", settings, repaint=0.5)
        m = app.current.conversation.messages[-1].metrics
        assert m.num_disk_tokens == m.num_cached_tokens >= (num_blocks - 1) * 16 and m.num_memory_tokens == 0
        text = screen_text(app)
        assert f"reused {m.num_cached_tokens} of {m.num_prompt_tokens} · {m.num_disk_tokens} from disk ·" in text
        assert f"memory 0 · disk {m.num_disk_tokens} · prefilled {m.num_prefilled_tokens}" in text
