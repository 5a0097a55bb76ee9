"""Gemma 4 beyond tests/test_architectures.py: as the Hub ships it, a multimodal wrapper
(Gemma4ForConditionalGeneration) whose config.json keeps the text model's config under text_config and whose
weights keep it under model.language_model.*, beside vision and audio towers: llmchat runs the text model of such a
folder, with the logits transformers' text model gives. And a GGUF of a variant llmchat does not run is one line."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from arch_cases import CASES, hf_model, save_folder
from llmchat.core.model.dense import DenseKV
from llmchat.core.model.loader import load_model
from llmchat.core.weights.errors import ModelLoadError
from llmchat.core.weights.tensor_source import GGUFSource

pytest.importorskip("transformers")

PROMPT = [504, 3458, 282, 4649, 314, 7042, 30, 19842, 281, 816, 6330, 28, 5248, 2379, 288, 253, 1345, 30]


def test_the_text_model_of_a_wrapped_gemma4_folder_runs(tmp_path, default_model_dir):
    model = hf_model(next(c for c in CASES if c.name == "gemma4-e2b"))
    folder = save_folder(model, tmp_path / "wrapped", default_model_dir)
    text_config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": text_config,
        "vision_config": {"hidden_size": 8}}))
    (weights,) = folder.glob("*.safetensors")
    tensors = {name.replace("model.", "model.language_model.", 1): t for name, t in load_file(weights).items()}
    tensors |= {"model.vision_tower.patch_embedder.input_proj.weight": torch.ones(8, 12),
                "model.embed_vision.embedding_projection.weight": torch.ones(64, 8)}
    save_file(tensors, weights)

    loaded = load_model(folder, weight_dtype="float32")
    assert loaded.config.architecture == "Gemma4ForCausalLM" and loaded.config.per_layer_input_size == 8
    with torch.inference_mode():
        expected = model(torch.tensor([PROMPT])).logits[0]
        hidden = loaded.model(torch.tensor(PROMPT), torch.arange(len(PROMPT)), DenseKV(loaded.model, len(PROMPT)))
        got = loaded.model.compute_logits(hidden)
    assert (got - expected).abs().max().item() <= 1e-4


@pytest.mark.parametrize("extra", [{"expert_count": 128}, {"attention.head_count_kv": [8, 8, 8, 8, 8, 2]}])
def test_a_gemma4_gguf_with_experts_or_per_layer_kv_heads_is_refused_in_one_line(tmp_path, extra):
    import gguf

    path = tmp_path / "moe.gguf"
    w = gguf.GGUFWriter(str(path), "gemma4")
    for key, value in {"block_count": 6, "embedding_length": 64, "feed_forward_length": 96, "vocab_size": 100,
                       "attention.head_count": 8, "attention.head_count_kv": 8, **extra}.items():
        if isinstance(value, list):
            w.add_array(f"gemma4.{key}", value)
        else:
            w.add_uint32(f"gemma4.{key}", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match="mixture-of-experts layers or per-layer KV head counts: llmchat runs the "
                                             "dense Gemma 4 models") as e:
        GGUFSource(path)
    assert "\n" not in str(e.value)
