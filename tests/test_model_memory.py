"""The picker's memory estimate counts the weights the way the loader will hold them (model/loader.resolve_weight_dtype)."""
from __future__ import annotations

import pytest

from llmchat.core.model.loader import resolve_weight_dtype
from llmchat.core.weights.inventory import ModelEntry
from llmchat.core.weights.memory import BYTES_PER_PARAM, bytes_per_param, memory_needed


@pytest.mark.parametrize("weight_format", [None, "auto", "float32", "bfloat16"])
@pytest.mark.parametrize("dtype", [None, "float32", "bfloat16"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("gguf", [True, False])
def test_bytes_per_param_follows_the_loaders_choice(weight_format, dtype, device, gguf):
    chosen = resolve_weight_dtype(weight_format, device, dtype or ("float32" if device == "cpu" else "bfloat16"), gguf)
    expected = None if chosen == "gguf" else BYTES_PER_PARAM[chosen]
    assert bytes_per_param(weight_format, dtype, device, gguf) == expected


def test_a_quantized_gguf_on_the_cpu_needs_its_file_size_not_four_bytes_a_parameter():
    entry = ModelEntry("x.gguf", "llmchat", "llmchat", "/m/x.gguf", size_bytes=700_000_000, num_params=1_200_000_000)
    assert memory_needed(entry, bytes_per_param(None, None, "cpu", gguf=True), 10) == 700_000_010
    assert memory_needed(entry, bytes_per_param("float32", None, "cpu", gguf=True), 10) == 4_800_000_010
