"""UI test fixtures: an app on a fresh data dir, driven by a real engine on a tiny random-weight model."""
from __future__ import annotations

import pytest

from llmchat.tui.app import LlmChatApp


@pytest.fixture
def engine_factory(chatty_model):
    """Builds the real engine service on the tiny model, the way the app's default factory does."""

    def factory(progress, sink):
        from llmchat.core.config import EngineConfig
        from llmchat.core.engine.engine import LLMEngine
        from llmchat.core.backends.service import EngineService

        progress("building the tiny test engine")
        config = EngineConfig(max_num_seqs=8, kv_cache_bytes=4 << 20)  # 512 blocks of 16 tokens
        return EngineService(LLMEngine(chatty_model, config), sink)

    return factory


@pytest.fixture
def make_app(tmp_path, engine_factory):
    def make(data_dir=None, typeahead: bool = False) -> LlmChatApp:
        app = LlmChatApp(data_dir or tmp_path / "data", engine_factory)
        app.typeahead = typeahead  # off unless a test asks: prefill while typing makes reuse counts timing-bound
        return app

    return make
