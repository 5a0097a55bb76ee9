"""GGUF metadata (and its RoPE-parameter tensors) -> ModelConfig, for every architecture in gguf_arch.

Every number is checked against `check_config_bounds` before anything is sized from it. Where llama.cpp
hard-codes what Hugging Face configures (Gemma 3's local RoPE base, SmolLM3's no-RoPE step, Gemma's
attention scale), the same constants are used here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..config import FULL_ATTENTION, NO_ROPE_ATTENTION, SLIDING_ATTENTION, ModelConfig
from .checkpoint import check_config_bounds, check_count
from .errors import ModelLoadError
from .gguf_arch import GGUFArch
from .gguf_meta import gguf_value


def _f32(value: Any) -> float:
    return float(str(np.float32(value)))  # 9.999999747e-06 stored as f32 -> 1e-05, as in the HF config


def _int(value: Any) -> Any:
    """An integer metadata value as int; anything else as it is, for `check_config_bounds` to name."""
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value


def _rope_tensor(reader: Any, name: str) -> list[float] | None:
    for t in reader.tensors:
        if t.name == name:
            return [float(x) for x in np.asarray(t.data, dtype=np.float32).reshape(-1)]
    return None


def _layer_types(arch: GGUFArch, num_layers: int, window: int | None) -> tuple[str, ...]:
    if arch.name == "gemma2":  # llama.cpp: every other layer slides, the first included
        return tuple(SLIDING_ATTENTION if i % 2 == 0 else FULL_ATTENTION for i in range(num_layers))
    if arch.name == "gemma3":  # five sliding layers, then one full
        return tuple(FULL_ATTENTION if (i + 1) % 6 == 0 else SLIDING_ATTENTION for i in range(num_layers))
    if arch.name == "smollm3":  # llama.cpp's fixed step: every fourth layer without RoPE
        return tuple(NO_ROPE_ATTENTION if (i + 1) % 4 == 0 else FULL_ATTENTION for i in range(num_layers))
    return ((SLIDING_ATTENTION if window else FULL_ATTENTION),) * num_layers


def _rope_scaling(reader: Any, a: str, head_dim: int, rotary_dim: int) -> dict | None:
    if (freqs := _rope_tensor(reader, "rope_freqs.weight")) is not None:  # Llama 3.1+: per-frequency factors
        if len(freqs) != rotary_dim // 2:
            raise ModelLoadError(f"rope_freqs holds {len(freqs)} factors; head size {head_dim} needs "
                                 f"{rotary_dim // 2}")
        return {"rope_type": "freq_factors", "factors": freqs}
    long, short = _rope_tensor(reader, "rope_factors_long.weight"), _rope_tensor(reader, "rope_factors_short.weight")
    original = _int(gguf_value(reader, f"{a}.rope.scaling.original_context_length"))
    if long is not None and short is not None:  # Phi-3 LongRoPE
        scaling = {"rope_type": "longrope", "long_factor": long, "short_factor": short,
                   "original_max_position_embeddings": original or gguf_value(reader, f"{a}.context_length")}
        if (attn_factor := gguf_value(reader, f"{a}.rope.scaling.attn_factor")) is not None:
            scaling["attention_factor"] = _f32(attn_factor)
        return scaling
    kind = gguf_value(reader, f"{a}.rope.scaling.type")
    factor = gguf_value(reader, f"{a}.rope.scaling.factor")
    if kind in (None, "none") or factor is None:
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": _f32(factor)}
    if kind == "yarn":
        scaling = {"rope_type": "yarn", "factor": _f32(factor), "original_max_position_embeddings": original}
        for key, gguf_key in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
            if (value := gguf_value(reader, f"{a}.rope.scaling.{gguf_key}")) is not None:
                scaling[key] = _f32(value)
        return scaling
    raise ModelLoadError(f"RoPE scaling {kind!r} in the GGUF is not supported (llmchat reads linear and yarn)")


def _gemma4(reader: Any, path: Path, values: dict[str, Any]) -> dict[str, Any]:
    """Gemma 4's metadata (convert_hf_to_gguf.py's Gemma4Model): per-type head sizes and RoPE, the sliding
    pattern, KV sharing, per-layer embeddings, per-layer MLP widths. Fixes `values` (the shape) in place and
    returns ModelConfig's Gemma 4 options; one line for what llmchat does not run."""
    def get(key: str, default: Any = None) -> Any:
        return gguf_value(reader, f"gemma4.{key}", default)

    if get("expert_count") or isinstance(kv := values["num_key_value_heads"], list) and len(set(kv)) > 1:
        raise ModelLoadError(f"{path} is a Gemma 4 with mixture-of-experts layers or per-layer KV head counts"
                             ": llmchat runs the dense Gemma 4 models (E2B, E4B)")
    if isinstance(kv, list):
        values["num_key_value_heads"] = _int(kv[0])
    widths = values["intermediate_size"]
    values["intermediate_size"] = _int(min(widths)) if isinstance(widths, list) else widths
    pattern = get("attention.sliding_window_pattern")
    if not isinstance(pattern, list) or len(pattern) != values["num_hidden_layers"]:
        raise ModelLoadError(f"{path} lacks gemma4.attention.sliding_window_pattern for each of its layers")
    global_head_dim = check_count("head_dim", values["head_dim"], str(path))  # key_length: the full layers'
    values["head_dim"] = _int(get("attention.key_length_swa", global_head_dim))
    return dict(
        layer_types=tuple(SLIDING_ATTENTION if swa else FULL_ATTENTION for swa in pattern),
        global_head_dim=global_head_dim if global_head_dim != values["head_dim"] else None,
        num_kv_shared_layers=_int(get("attention.shared_kv_layers", 0)), value_norm=True,
        double_wide_mlp=isinstance(widths, list) and len(set(widths)) > 1,
        per_layer_input_size=_int(get("embedding_length_per_layer_input", 0)), layer_scalar=True,
        rope_local_theta=_f32(get("rope.freq_base_swa", 10000.0)),
        partial_rotary_factor=int(get("rope.dimension_count_swa", values["head_dim"])) / values["head_dim"],
        qk_norm=True, norm_weight_offset=0.0, query_pre_attn_scalar=1.0, attn_logit_softcapping=None,
        widths=widths,
    )


def config_from_gguf(reader: Any, arch: GGUFArch, path: Path, tied: bool) -> ModelConfig:
    a = arch.name

    def need(key: str) -> Any:
        if (value := gguf_value(reader, f"{a}.{key}")) is None:
            raise ModelLoadError(f"{path} lacks the metadata {a}.{key}: it is not a complete {a} GGUF file")
        return _int(value)

    tokens = reader.fields.get("tokenizer.ggml.tokens")
    values: dict[str, Any] = {
        "vocab_size": len(tokens.data) if tokens is not None else need("vocab_size"),
        "hidden_size": need("embedding_length"),
        "intermediate_size": need("feed_forward_length"),
        "num_hidden_layers": need("block_count"),
        "num_attention_heads": need("attention.head_count"),
        "max_position_embeddings": _int(gguf_value(reader, f"{a}.context_length", 2048)),
    }
    values["num_key_value_heads"] = _int(gguf_value(reader, f"{a}.attention.head_count_kv",
                                                    values["num_attention_heads"]))
    for name in ("hidden_size", "num_attention_heads", "num_hidden_layers"):  # before dividing or sizing
        check_count(name, values[name], str(path))
    head_dim = values["head_dim"] = _int(gguf_value(reader, f"{a}.attention.key_length",
                                                    values["hidden_size"] // values["num_attention_heads"]))
    gemma4 = _gemma4(reader, path, values) if a == "gemma4" else {}
    widths = gemma4.pop("widths", None)
    bos, eos = gguf_value(reader, "tokenizer.ggml.bos_token_id"), [
        gguf_value(reader, f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    window = _int(gguf_value(reader, f"{a}.attention.sliding_window"))
    try:
        rotary_dim = int(gguf_value(reader, f"{a}.rope.dimension_count", head_dim))
        values |= {
            "rms_norm_eps": _f32(gguf_value(reader, f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
            "rope_theta": _f32(gguf_value(reader, f"{a}.rope.freq_base", 10000.0)),
            "bos_token_id": None if bos is None else int(bos),
            "eos_token_ids": tuple(dict.fromkeys(int(i) for i in eos if i is not None)),
        }
        layer_types = _layer_types(arch, values["num_hidden_layers"], window)
        rope_scaling = _rope_scaling(reader, a, head_dim, rotary_dim)
    except (TypeError, ValueError) as e:  # e.g. a string where a number belongs
        raise ModelLoadError(f"{path} has {a} metadata llmchat cannot use ({e})") from e
    check_config_bounds(values, str(path))  # e.g. per-layer head counts (a list) where one number belongs
    gemma = a in ("gemma2", "gemma3", "gemma4")
    big_gemma = gemma and values["num_hidden_layers"] in (46, 62)  # 27B: llama.cpp scales by hidden / heads
    softcaps = {k: _f32(v) if (v := gguf_value(reader, f"{a}.{k}")) is not None else None
                for k in ("attn_logit_softcapping", "final_logit_softcapping")}
    options = dict(
        architecture=arch.hf_architecture, tie_word_embeddings=tied, **values,
        layer_types=layer_types,
        sliding_window=window if SLIDING_ATTENTION in layer_types else None,
        rope_scaling=rope_scaling,
        rope_local_theta=10000.0 if a == "gemma3" else None,
        partial_rotary_factor=rotary_dim / head_dim,
        attention_bias=a == "qwen2",
        qk_norm=a in ("qwen3", "gemma3"),
        hidden_act="gelu_pytorch_tanh" if gemma else "silu",
        sandwich_norms=gemma,
        norm_weight_offset=1.0 if gemma else 0.0,
        embedding_scale=float(values["hidden_size"]) ** 0.5 if gemma else 1.0,
        query_pre_attn_scalar=(values["hidden_size"] / values["num_attention_heads"] if big_gemma else head_dim)
        if gemma else None,
        attn_logit_softcapping=softcaps["attn_logit_softcapping"] if gemma else None,
        final_logit_softcapping=softcaps["final_logit_softcapping"] if gemma else None,
    )
    config = ModelConfig(**(options | gemma4))
    if isinstance(widths, list) and [config.intermediate_size_of(i) for i in range(len(widths))] != widths:
        raise ModelLoadError(f"{path} has MLP widths {widths} that llmchat's Gemma 4 does not run")
    return config
