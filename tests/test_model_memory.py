"""What the picker says a model needs: its weights as the loader will hold them (the same choice as
loader.resolve_weight_dtype) plus the KV budget."""
from __future__ import annotations

import pytest

from llmchat.core.model.loader import resolve_weight_dtype
from llmchat.core.weights.inventory import ModelEntry
from llmchat.core.weights.memory import BYTES_PER_PARAM, bytes_per_param, memory_needed

ENTRY = ModelEntry("m", "ollama", "ollama", "/x.gguf", size_bytes=700_000_000, num_params=1_000_000_000)


@pytest.mark.parametrize("weights", ["auto", "float32", "bfloat16", None])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", None])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("gguf", [True, False])
def test_the_estimate_follows_the_loaders_choice(weights, dtype, device, gguf):
    activations = dtype or ("float32" if device == "cpu" else "bfloat16")
    chosen = resolve_weight_dtype(weights, device, activations, gguf=gguf)
    per_param = bytes_per_param(weights, dtype, device, gguf)
    assert per_param == BYTES_PER_PARAM.get(chosen)
    needed = memory_needed(ENTRY, per_param, kv_cache_bytes=1 << 30)
    as_stored = ENTRY.size_bytes if chosen == "gguf" else int(ENTRY.num_params * BYTES_PER_PARAM[chosen])
    assert needed == as_stored + (1 << 30)
