"""Tiny random-weight models of every architecture llmchat runs, built by transformers from each real
model's config shape (scaled down: few layers, hidden 64; what makes the family itself kept: GQA, head size
larger than hidden / heads, biases, partial rotary, RoPE scaling, windows small enough to matter here).

No hub: the configs are written here through transformers' own config classes. Every weight is redrawn
from a seeded generator at a scale where each option changes the logits (norm weights away from 1, biases
away from 0), so a missed option cannot pass.
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

VOCAB = 49152  # the default model's tokenizer, reused by every case
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
             rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=None)


@dataclass(frozen=True, slots=True)
class Case:
    name: str  # what it stands for
    config_class: str  # transformers' config class
    gguf_arch: str  # llama.cpp's general.architecture for it
    kwargs: dict[str, Any]


def _longrope(dim: int) -> dict:
    half = dim // 2
    return {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0 + 0.05 * i for i in range(half)], "long_factor": [1.0 + 0.5 * i for i in range(half)],
            "original_max_position_embeddings": 4096}


CASES = [
    Case("llama3.2", "LlamaConfig", "llama", dict(
        num_hidden_layers=2, head_dim=16, tie_word_embeddings=True, max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    Case("llama-linear", "LlamaConfig", "llama", dict(
        num_hidden_layers=2, head_dim=16, max_position_embeddings=8192,
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})),
    Case("llama-yarn", "LlamaConfig", "llama", dict(
        num_hidden_layers=2, head_dim=16, max_position_embeddings=32768,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 8192})),
    Case("qwen2.5", "Qwen2Config", "qwen2", dict(
        num_hidden_layers=2, tie_word_embeddings=True, max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    Case("qwen3", "Qwen3Config", "qwen3", dict(
        num_hidden_layers=2, head_dim=32, tie_word_embeddings=True, max_position_embeddings=40960,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    Case("mistral", "MistralConfig", "llama", dict(
        num_hidden_layers=2, head_dim=16, sliding_window=8, max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    Case("phi-4-mini", "Phi3Config", "phi3", dict(
        num_hidden_layers=2, tie_word_embeddings=True, max_position_embeddings=131072,
        original_max_position_embeddings=4096, rope_parameters=_longrope(12))),
    Case("gemma2", "Gemma2Config", "gemma2", dict(
        num_hidden_layers=2, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
        attn_logit_softcapping=2.0, final_logit_softcapping=5.0, max_position_embeddings=8192)),
    Case("gemma3", "Gemma3TextConfig", "gemma3", dict(
        num_hidden_layers=6, head_dim=32, query_pre_attn_scalar=32, sliding_window=8, max_position_embeddings=32768,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0}})),
    # Gemma 4 E2B's shape: MQA, sliding layers of head size 256 and full ones of 512 (here 16 and 32), the last
    # layers reading earlier layers' K/V (here 3 of 6; E2B 20 of 35) with a double-wide MLP, per-layer embeddings
    Case("gemma4-e2b", "Gemma4TextConfig", "gemma4", dict(
        num_hidden_layers=6, num_key_value_heads=1, head_dim=16, global_head_dim=32, sliding_window=8,
        layer_types=(["sliding_attention"] * 2 + ["full_attention"]) * 2, num_kv_shared_layers=3,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB, use_double_wide_mlp=True,
        final_logit_softcapping=30.0, max_position_embeddings=131072,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1000000.0}})),
    Case("smollm3", "SmolLM3Config", "smollm3", dict(
        num_hidden_layers=4, tie_word_embeddings=True, max_position_embeddings=65536,
        rope_parameters={"rope_type": "default", "rope_theta": 2000000.0})),
]
CASE_NAMES = [c.name for c in CASES]


def hf_config(case: Case):
    import transformers

    return getattr(transformers, case.config_class)(**(SHAPE | case.kwargs))


@torch.no_grad()
def hf_model(case: Case, seed: int = 0):
    """The transformers model of `case`, fp32, eager attention, weights redrawn from `seed`."""
    import transformers

    config = hf_config(case)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    gemma = case.gguf_arch in ("gemma2", "gemma3")
    for name, p in [*model.named_parameters(), *model.named_buffers()]:
        if name.endswith(("inv_freq", "embed_scale")):  # computed buffers, kept
            continue
        elif name.endswith("layer_scalar"):  # Gemma 4: a buffer, ones unless drawn here
            p.copy_(1.0 + (torch.rand(p.shape, generator=gen) - 0.5))
        elif "norm" in name:  # Gemma 2/3 hold w and compute (1 + w)
            p.copy_((0.0 if gemma else 1.0) + (torch.rand(p.shape, generator=gen) - 0.5) * 0.6)
        elif "embed_tokens" in name:
            p.copy_(torch.randn(p.shape, generator=gen))
        elif name.endswith("bias"):
            p.copy_((torch.rand(p.shape, generator=gen) - 0.5))
        else:
            bound = 2 * p.shape[-1] ** -0.5
            p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound)
    return model.eval()


def save_folder(model, folder: Path, tokenizer_dir: Path) -> Path:
    """A Hugging Face folder: transformers' own save (config.json, safetensors) plus the default tokenizer."""
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, folder / name)
    return folder


def llama3_rope_freqs(p: dict, dim: int) -> list[float]:
    """llama.cpp's convert: the Llama 3 scaling as one factor per frequency (`rope_freqs`)."""
    freqs = 1.0 / (p["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    low_wavelen = p["original_max_position_embeddings"] / p["low_freq_factor"]
    high_wavelen = p["original_max_position_embeddings"] / p["high_freq_factor"]
    factors = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(p["factor"])
        else:
            smooth = (p["original_max_position_embeddings"] / wavelen - p["low_freq_factor"]) / (
                p["high_freq_factor"] - p["low_freq_factor"])
            factors.append(1 / ((1 - smooth) / p["factor"] + smooth))
    return factors
