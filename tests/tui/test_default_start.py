"""The app as `llmchat` starts it: the default engine factory on the default model with its default weight format
(its GGUF blocks kept quantized on the CPU), not the tiny test engine the other UI tests use. A backend that
cannot describe itself or load made the app unusable once while every other UI test passed."""
from __future__ import annotations

from tui_helpers import SIZE, one_turn, quit_app, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.config import EngineConfig
from llmchat.tui.app import LlmChatApp


async def test_the_app_starts_and_answers_on_the_default_model_and_weights(tmp_path, default_gguf):
    config = EngineConfig(model=str(default_gguf), kv_disk_bytes=0, kv_cache_bytes=8 << 20)
    app = LlmChatApp(tmp_path / "data", engine_config=config)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready or app.bridge.failure, timeout=300)
        assert app.bridge.failure is None, app.bridge.failure
        info = app.bridge.info
        assert info.context_length > 0 and info.kv_bytes_per_token > 0
        assert info.dtype.startswith("gguf:"), info.dtype  # the file's own blocks, not fp32 copies
        await one_turn(pilot, "What is 2 + 2?", ChatSettings(None, 0.0, 1.0, 6))
        reply = app.current.conversation.messages[-1]
        assert reply.status == "done" and reply.content.strip() and reply.metrics.num_output_tokens > 0
        await wait_for(pilot, lambda: reply.content.strip()[:12] in screen_text(app))  # (once it repaints)
        await quit_app(pilot)
