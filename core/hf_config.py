"""Hugging Face config.json <-> ModelConfig, for every architecture llmchat runs.

Reads both spellings Hugging Face has used: the legacy keys real checkpoints ship (`rope_theta`,
`rope_scaling`, `sliding_window_pattern`, `rope_local_base_freq`) and transformers 5's (`rope_parameters`,
per layer type for Gemma 3; `layer_types`). What an architecture fixes rather than configures (Gemma's
`(1 + w)` norms, Qwen3's q/k norm) is set here from the architecture name, so the model reads only options.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .config import FULL_ATTENTION, LAYER_TYPES, NO_ROPE_ATTENTION, SLIDING_ATTENTION, ModelConfig

# architecture (config.json's "architectures"[0]) -> model_type
ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "Phi3ForCausalLM": "phi3", "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text", "Gemma4ForCausalLM": "gemma4_text", "SmolLM3ForCausalLM": "smollm3",
}
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)
# multimodal wrappers whose text model llmchat runs: its config is text_config, its weights model.language_model.*
TEXT_OF_WRAPPER = {"Gemma4ForConditionalGeneration": "Gemma4ForCausalLM"}
ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope", "freq_factors", "proportional")
_GEMMA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma4ForCausalLM")
GEMMA4 = "Gemma4ForCausalLM"


def unsupported(arch: str) -> str:
    return f"unsupported architecture {arch or '(none)'!r}; llmchat runs {', '.join(SUPPORTED_ARCHITECTURES)}"


def _rope(cfg: dict, arch: str) -> tuple[float, dict | None, float, float | None]:
    """(base of full-attention layers, their scaling or None, partial rotary factor, sliding layers' own base)."""
    params = cfg.get("rope_parameters")
    local_theta = cfg.get("rope_local_base_freq")
    if isinstance(params, dict) and FULL_ATTENTION in params:  # transformers 5, per layer type (Gemma 3)
        local_theta = params.get(SLIDING_ATTENTION, {}).get("rope_theta", local_theta)
        params = params[FULL_ATTENTION]
    scaling = dict(params) if isinstance(params, dict) else dict(cfg.get("rope_scaling") or {})
    theta = scaling.pop("rope_theta", cfg.get("rope_theta", 10000.0))
    partial = scaling.pop("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    kind = scaling.pop("rope_type", None) or scaling.pop("type", None) or "default"
    scaling.pop("type", None)
    if kind == "default":
        scaling_out = None
    elif kind in ROPE_TYPES:
        if "original_max_position_embeddings" not in scaling and cfg.get("original_max_position_embeddings"):
            scaling["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
        scaling_out = {"rope_type": kind, **scaling}
    else:
        raise ValueError(f"RoPE scaling type {kind!r} is not supported (llmchat reads {', '.join(ROPE_TYPES)})")
    if arch == "Gemma3ForCausalLM" and local_theta is None:
        local_theta = 10000.0
    if arch == GEMMA4:  # proportional RoPE turns a fraction of the full layers' pairs; sliding layers all of theirs
        local_theta = 10000.0 if local_theta is None else local_theta
        if scaling_out is not None and scaling_out["rope_type"] == "proportional":
            scaling_out["partial_rotary_factor"] = partial
            partial = (cfg.get("rope_parameters") or {}).get(SLIDING_ATTENTION, {}).get(
                "partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    return float(theta), scaling_out, float(partial), None if local_theta is None else float(local_theta)


def _layer_types(cfg: dict, arch: str, num_layers: int) -> tuple[str, ...]:
    window = cfg.get("sliding_window")
    given = cfg.get("layer_types")
    if given:
        kinds = list(given)
    elif arch == "Gemma2ForCausalLM":
        kinds = [SLIDING_ATTENTION if i % 2 == 0 else FULL_ATTENTION for i in range(num_layers)]
    elif arch in ("Gemma3ForCausalLM", GEMMA4):
        pattern = cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern") or 6
        kinds = [FULL_ATTENTION if (i + 1) % pattern == 0 else SLIDING_ATTENTION for i in range(num_layers)]
    elif arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "SmolLM3ForCausalLM"):
        first = cfg.get("max_window_layers", num_layers) if cfg.get("use_sliding_window") and window else num_layers
        kinds = [SLIDING_ATTENTION if i >= first else FULL_ATTENTION for i in range(num_layers)]
    else:  # Llama, Mistral, Phi-3: the window, where one is set, applies to every layer
        kinds = [SLIDING_ATTENTION if window else FULL_ATTENTION] * num_layers
    if len(kinds) != num_layers or not set(kinds) <= set(LAYER_TYPES):
        raise ValueError(f"layer_types {kinds!r} is not {num_layers} of {', '.join(LAYER_TYPES)}")
    rope_flags = cfg.get("no_rope_layers")  # SmolLM3: 1 = this layer uses RoPE, 0 = it does not
    if arch == "SmolLM3ForCausalLM" and rope_flags is None:
        interval = cfg.get("no_rope_layer_interval", 4)
        rope_flags = [int((i + 1) % interval != 0) for i in range(num_layers)]
    for i, uses_rope in enumerate(rope_flags or []):
        if not uses_rope:
            if kinds[i] != FULL_ATTENTION:
                raise ValueError(f"layer {i} is both {kinds[i]} and without RoPE, which llmchat does not run")
            kinds[i] = NO_ROPE_ATTENTION
    return tuple(kinds)


def _gemma4(cfg: dict, layer_types: tuple[str, ...]) -> dict[str, Any]:
    """Gemma 4's own options (config_from_hf_dict's keyword arguments); ValueError for what llmchat does not run."""
    refused = [key for key in ("enable_moe_block", "attention_k_eq_v", "num_global_key_value_heads") if cfg.get(key)]
    if refused or cfg.get("use_bidirectional_attention") == "all":
        raise ValueError(f"Gemma 4 with {', '.join(refused) or 'bidirectional attention'} (mixture-of-experts or "
                         "key-equals-value attention) is not supported; llmchat runs the dense Gemma 4 models (E2B, E4B)")
    full = [i for i, kind in enumerate(layer_types) if kind == FULL_ATTENTION]
    per_layer = cfg.get("per_layer_config") or {}  # transformers' own save: {"5": {"head_dim": 512}, ...}
    overrides = {i: (per_layer.get(str(i)) or per_layer.get(i) or {}).get("head_dim") for i in full}
    global_head_dim = cfg.get("global_head_dim") or next((d for d in overrides.values() if d), None)
    per_layer_size = cfg.get("hidden_size_per_layer_input") or 0
    if per_layer_size and cfg.get("vocab_size_per_layer_input", cfg["vocab_size"]) != cfg["vocab_size"]:
        raise ValueError("Gemma 4 with a per-layer embedding vocabulary unlike the main one is not supported")
    return dict(global_head_dim=global_head_dim, num_kv_shared_layers=cfg.get("num_kv_shared_layers") or 0,
                value_norm=True, double_wide_mlp=bool(cfg.get("use_double_wide_mlp")),
                per_layer_input_size=per_layer_size, layer_scalar=True)


def config_from_hf_dict(cfg: dict) -> ModelConfig:
    arch = (cfg.get("architectures") or [""])[0]
    if arch in TEXT_OF_WRAPPER and isinstance(cfg.get("text_config"), dict):  # the text model; no images, audio
        arch = TEXT_OF_WRAPPER[arch]
        cfg = cfg["text_config"] | {"architectures": [arch]}
    if arch not in ARCHITECTURES:
        raise ValueError(unsupported(arch))
    num_heads = cfg["num_attention_heads"]
    num_layers = cfg["num_hidden_layers"]
    eos = cfg.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
    theta, scaling, partial, local_theta = _rope(cfg, arch)
    layer_types = _layer_types(cfg, arch, num_layers)
    gemma = arch in _GEMMA
    gemma4 = _gemma4(cfg, layer_types) if arch == GEMMA4 else {}
    return ModelConfig(
        architecture=arch,
        vocab_size=cfg["vocab_size"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=cfg.get("num_key_value_heads") or num_heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        max_position_embeddings=cfg.get("max_position_embeddings", 2048),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", gemma)),
        attention_bias=bool(cfg.get("attention_bias", arch == "Qwen2ForCausalLM")),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=eos_ids,
        layer_types=layer_types,
        sliding_window=cfg.get("sliding_window") if SLIDING_ATTENTION in layer_types else None,
        rope_scaling=scaling,
        rope_local_theta=local_theta if arch in ("Gemma3ForCausalLM", GEMMA4) else None,
        partial_rotary_factor=partial,
        qk_norm=arch in ("Qwen3ForCausalLM", "Gemma3ForCausalLM", GEMMA4),
        hidden_act=cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu",
        sandwich_norms=gemma,
        norm_weight_offset=1.0 if gemma and arch != GEMMA4 else 0.0,  # Gemma 4 computes x * w
        embedding_scale=float(cfg["hidden_size"]) ** 0.5 if gemma else 1.0,
        query_pre_attn_scalar=(1.0 if arch == GEMMA4 else cfg.get("query_pre_attn_scalar")) if gemma else None,
        attn_logit_softcapping=cfg.get("attn_logit_softcapping") if gemma else None,
        final_logit_softcapping=cfg.get("final_logit_softcapping") if gemma else None,
        **gemma4,
    )


def config_to_hf_dict(config: ModelConfig) -> dict[str, Any]:
    """Legacy Hugging Face keys for every option (what checkpoints ship), read back by config_from_hf_dict."""
    d = asdict(config)
    arch = d.pop("architecture")
    eos = d.pop("eos_token_ids")
    for derived in ("qk_norm", "sandwich_norms", "norm_weight_offset", "embedding_scale", "value_norm",
                    "layer_scalar"):
        d.pop(derived)  # fixed by the architecture
    d["hidden_size_per_layer_input"] = d.pop("per_layer_input_size")
    d["use_double_wide_mlp"] = d.pop("double_wide_mlp")
    kinds = d.pop("layer_types")
    d["layer_types"] = [FULL_ATTENTION if k == NO_ROPE_ATTENTION else k for k in kinds]
    if NO_ROPE_ATTENTION in kinds:
        d["no_rope_layers"] = [int(k != NO_ROPE_ATTENTION) for k in kinds]
    d["rope_local_base_freq"] = d.pop("rope_local_theta")
    d["architectures"] = [arch]
    d["model_type"] = ARCHITECTURES[arch]
    d["eos_token_id"] = list(eos) if len(eos) != 1 else eos[0]
    return d
