"""config.json -> ModelConfig: the legacy keys real checkpoints ship read like transformers 5's spelling; the
converter's config.json reads back to the same config; RoPE tables against transformers' own functions."""
from __future__ import annotations

import pytest
import torch

from arch_cases import CASES, hf_config
from llmchat.core.config import FULL_ATTENTION, NO_ROPE_ATTENTION, SLIDING_ATTENTION, ModelConfig
from llmchat.core.model.rope import rope_table

ARCH_OF = {"LlamaConfig": "LlamaForCausalLM", "Qwen2Config": "Qwen2ForCausalLM", "Qwen3Config": "Qwen3ForCausalLM",
           "MistralConfig": "MistralForCausalLM", "Phi3Config": "Phi3ForCausalLM", "Gemma2Config": "Gemma2ForCausalLM",
           "Gemma3TextConfig": "Gemma3ForCausalLM", "Gemma4TextConfig": "Gemma4ForCausalLM",
           "SmolLM3Config": "SmolLM3ForCausalLM"}


def v5_dict(case) -> dict:
    return hf_config(case).to_dict() | {"architectures": [ARCH_OF[case.config_class]]}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_written_config_reads_back_the_same(case):
    config = ModelConfig.from_hf_dict(v5_dict(case))
    assert ModelConfig.from_hf_dict(config.to_hf_dict()) == config


def test_legacy_keys_read_like_transformers_5():
    llama3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    case = CASES[0]
    legacy = v5_dict(case)
    del legacy["rope_parameters"]
    legacy |= {"rope_theta": 500000.0, "rope_scaling": llama3}
    assert ModelConfig.from_hf_dict(legacy) == ModelConfig.from_hf_dict(v5_dict(case))

    gemma3 = {"architectures": ["Gemma3ForCausalLM"], "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
              "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
              "rope_theta": 1e6, "rope_local_base_freq": 10000.0, "rope_scaling": {"type": "linear", "factor": 8.0},
              "sliding_window": 512, "sliding_window_pattern": 6, "query_pre_attn_scalar": 32}
    c = ModelConfig.from_hf_dict(gemma3)
    assert c.layer_types == (SLIDING_ATTENTION,) * 5 + (FULL_ATTENTION, SLIDING_ATTENTION)
    assert (c.rope_theta, c.rope_local_theta, c.rope_scaling) == (1e6, 10000.0, {"rope_type": "linear", "factor": 8.0})
    assert c.norm_weight_offset == 1.0 and c.qk_norm and c.sandwich_norms and c.embedding_scale == 8.0

    phi = {"architectures": ["Phi3ForCausalLM"], "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "partial_rotary_factor": 0.75,
           "original_max_position_embeddings": 4096, "max_position_embeddings": 131072,
           "rope_scaling": {"type": "longrope", "long_factor": [2.0] * 6, "short_factor": [1.0] * 6}}
    c = ModelConfig.from_hf_dict(phi)
    assert c.rotary_dim == 12 and c.rope_scaling["rope_type"] == "longrope"
    assert c.rope_scaling["original_max_position_embeddings"] == 4096

    smol = {"architectures": ["SmolLM3ForCausalLM"], "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 8, "num_attention_heads": 4, "no_rope_layers": [1, 1, 1, 0, 1, 1, 1, 0]}
    assert ModelConfig.from_hf_dict(smol).layer_types == ((FULL_ATTENTION,) * 3 + (NO_ROPE_ATTENTION,)) * 2


# Gemma 4 E2B's text config as the Hub's config.json spells it (global_head_dim, not per_layer_config)
GEMMA4_E2B = {"architectures": ["Gemma4ForCausalLM"], "vocab_size": 262144, "hidden_size": 1536,
              "intermediate_size": 6144, "num_hidden_layers": 35, "num_attention_heads": 8, "num_key_value_heads": 1,
              "head_dim": 256, "global_head_dim": 512, "hidden_size_per_layer_input": 256,
              "vocab_size_per_layer_input": 262144, "num_kv_shared_layers": 20, "use_double_wide_mlp": True,
              "sliding_window": 512, "final_logit_softcapping": 30.0, "attention_k_eq_v": False,
              "enable_moe_block": False, "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7,
              "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                  "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                     "rope_theta": 1000000.0}}}


def test_gemma4_e2b_reads_as_per_layer_options():
    c = ModelConfig.from_hf_dict(GEMMA4_E2B)
    assert [c.head_dim_of(i) for i in (0, 4)] == [256, 512] and c.rotary_dim_of(4) == 512
    assert [c.kv_source_of(i) for i in (14, 15, 19, 34)] == [14, 13, 14, 14]  # the last sliding / full before 15
    assert [c.intermediate_size_of(i) for i in (14, 15)] == [6144, 12288]
    assert c.kv_bytes_per_token(2) == 2 * 1 * (12 * 256 + 3 * 512) * 2  # 15 layers store K/V, 20 read theirs
    assert c.rope_scaling == {"rope_type": "proportional", "partial_rotary_factor": 0.25}
    assert (c.per_layer_input_size, c.norm_weight_offset, c.attention_scale) == (256, 0.0, 1.0)
    assert ModelConfig.from_hf_dict(c.to_hf_dict()) == c


@pytest.mark.parametrize("key", ["enable_moe_block", "attention_k_eq_v"])
def test_gemma4_experts_and_shared_kv_projection_are_refused_in_one_line(key):
    with pytest.raises(ValueError, match=f"Gemma 4 with {key} .* llmchat runs the dense Gemma 4 models"):
        ModelConfig.from_hf_dict(GEMMA4_E2B | {key: True})


def test_unknown_rope_scaling_is_one_clear_error():
    d = v5_dict(CASES[0])
    d["rope_parameters"] = {"rope_type": "mrope", "rope_theta": 1e4}
    with pytest.raises(ValueError, match="RoPE scaling type 'mrope' is not supported"):
        ModelConfig.from_hf_dict(d)


@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "llama3"])
def test_rope_tables_match_transformers_init(kind):
    """Within the original context: cos|sin from transformers' inv_freq and attention factor (dynamic equals
    the default there, and past it transformers recomputes the whole sequence, which a KV cache cannot)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"linear": {"factor": 4.0}, "dynamic": {"factor": 2.0},
              "yarn": {"factor": 4.0, "original_max_position_embeddings": 1024},
              "llama3": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 1024}}[kind]
    config = LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=4096,
                         rope_parameters={"rope_type": kind, "rope_theta": 500000.0, **params})
    inv_freq, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    positions = torch.arange(4096).float()
    freqs = torch.outer(positions, inv_freq)
    expected = torch.cat([freqs.cos(), freqs.sin()], -1) * factor
    got = rope_table(64, 4096, 500000.0, {"rope_type": kind, **params}, 4096)
    assert (got - expected).abs().max() < 1e-5
