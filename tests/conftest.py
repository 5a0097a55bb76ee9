"""Shared fixtures: the real default model (fetched once, the way a user's machine gets it)."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def default_gguf() -> Path:
    """The default model's GGUF file (SmolLM2-135M-Instruct Q4_1), located or fetched like `llmchat pull` does."""
    from llmchat.core.weights import ModelLoadError, default_gguf_path

    try:
        return default_gguf_path(download=True)
    except ModelLoadError as e:  # offline and not cached: the model tests cannot run here
        pytest.skip(f"default model unavailable: {e}")
