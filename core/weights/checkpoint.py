"""Hugging Face-layout model folders: what a folder must hold, the bounds a config must respect, loading it.

A converted GGUF and a folder downloaded from the Hub look the same here: `config.json`, `*.safetensors`,
`tokenizer.json`, `tokenizer_config.json`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import ModelConfig
from .errors import ModelLoadError

if TYPE_CHECKING:
    import torch

HF_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
# (field, lowest, highest): far above any llama-family model, far below what would exhaust memory when a
# table (the RoPE cache, the per-layer tensor list) is sized from the number
CONFIG_BOUNDS = (
    ("num_hidden_layers", 1, 1024), ("hidden_size", 1, 1 << 16), ("intermediate_size", 1, 1 << 20),
    ("num_attention_heads", 1, 1024), ("num_key_value_heads", 1, 1024), ("head_dim", 2, 1024),
    ("vocab_size", 1, 1 << 22), ("max_position_embeddings", 1, 1 << 20),
)
_BOUNDS = {name: (low, high) for name, low, high in CONFIG_BOUNDS}


def check_hf_folder(folder: Path) -> None:
    missing = [name for name in HF_FILES if not (folder / name).is_file()]
    if not any(folder.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise ModelLoadError(f"{folder} is not a usable model folder: missing {', '.join(missing)} (a Hugging Face "
                             "folder needs config.json, *.safetensors, tokenizer.json and tokenizer_config.json)")


def check_count(name: str, value: object, where: str) -> int:
    """`value` if it is an int within the bound of the shape number `name`; ModelLoadError otherwise."""
    low, high = _BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ModelLoadError(f"{where} has {name}={value!r}, outside what llmchat accepts ({low}..{high}): "
                             "the file is damaged or not a llama-family model")
    return value


def check_config_bounds(values: dict[str, object], where: str) -> None:
    """Raise ModelLoadError unless every shape number is an int in its bound (checked before anything is sized)."""
    for name in _BOUNDS:
        check_count(name, values.get(name), where)
    for name, like in (("global_head_dim", "head_dim"), ("per_layer_input_size", "hidden_size")):
        if values.get(name):  # optional (Gemma 4): within the bound of the number it stands beside
            check_count(like, values[name], where)
    heads, kv_heads = values["num_attention_heads"], values["num_key_value_heads"]
    if heads % kv_heads:  # type: ignore[operator]
        raise ModelLoadError(f"{where} has {heads} heads, not a multiple of its {kv_heads} KV heads")
    if values["head_dim"] % 2:  # type: ignore[operator]
        raise ModelLoadError(f"{where} has an odd head_dim={values['head_dim']}: RoPE needs an even one")
    for name in ("rope_theta", "rms_norm_eps"):
        value = values.get(name)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value < 1e12:
            raise ModelLoadError(f"{where} has {name}={value!r}: it must be a finite positive number")
    vocab = values["vocab_size"]
    ids = [values.get("bos_token_id"), *(values.get("eos_token_ids") or ())]
    if any(i is not None and not (isinstance(i, int) and 0 <= i < vocab) for i in ids):  # type: ignore[operator]
        raise ModelLoadError(f"{where} has a BOS/EOS token id outside its vocabulary of {vocab}")


def expected_tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint with this config must hold (Hugging Face names), with its shape."""
    h, vocab = config.hidden_size, config.vocab_size
    fused = config.architecture == "Phi3ForCausalLM"  # ships q/k/v and gate/up as one tensor each
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, h)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        head_dim, f = config.head_dim_of(i), config.intermediate_size_of(i)
        q = config.num_attention_heads * head_dim
        kv = config.num_key_value_heads * head_dim if config.kv_source_of(i) == i else 0  # 0: KV-shared layer
        shapes |= {
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.o_proj.weight": (h, q), p + "mlp.down_proj.weight": (h, f),
        }
        if fused:
            shapes |= {p + "self_attn.qkv_proj.weight": (q + 2 * kv, h), p + "mlp.gate_up_proj.weight": (2 * f, h)}
        else:
            shapes |= {p + "self_attn.q_proj.weight": (q, h), p + "mlp.gate_proj.weight": (f, h),
                       p + "mlp.up_proj.weight": (f, h)}
            if kv:
                shapes |= {p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.v_proj.weight": (kv, h)}
        if config.attention_bias:
            shapes |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                       p + "self_attn.v_proj.bias": (kv,)}
        if config.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (head_dim,)
            if kv:
                shapes[p + "self_attn.k_norm.weight"] = (head_dim,)
        if config.sandwich_norms:
            shapes |= {p + "pre_feedforward_layernorm.weight": (h,), p + "post_feedforward_layernorm.weight": (h,)}
        if config.layer_scalar:
            shapes[p + "layer_scalar"] = (1,)
        if (ple := config.per_layer_input_size):
            shapes |= {p + "per_layer_input_gate.weight": (ple, h), p + "per_layer_projection.weight": (h, ple),
                       p + "post_per_layer_input_norm.weight": (h,)}
    if (ple := config.per_layer_input_size):
        size = config.num_hidden_layers * ple
        shapes |= {"model.embed_tokens_per_layer.weight": (vocab, size),
                   "model.per_layer_model_projection.weight": (size, h), "model.per_layer_projection_norm.weight": (ple,)}
    shapes["model.norm.weight"] = (h,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (vocab, h)
    return shapes


def check_tensor_shapes(config: ModelConfig, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    num_layers = len({name.split(".")[2] for name in shapes if name.startswith("model.layers.")})
    if num_layers != config.num_hidden_layers:  # before building a per-layer table from a hostile count
        raise ModelLoadError(f"{where} says it has {config.num_hidden_layers} layers but holds tensors for "
                             f"{num_layers}: the file is damaged")
    for name, want in expected_tensor_shapes(config).items():
        if name not in shapes:
            raise ModelLoadError(f"{where} lacks the tensor {name}, which its config needs")
        if tuple(shapes[name]) != want:
            raise ModelLoadError(f"tensor {name} in {where} has shape {list(shapes[name])}, its config implies "
                                 f"{list(want)}")


def read_config(folder: Path) -> ModelConfig:
    try:
        config = ModelConfig.from_dir(folder)
    except OSError as e:
        raise ModelLoadError(f"cannot read {folder / 'config.json'} ({e.strerror or e})") from e
    except (ValueError, KeyError, TypeError, AssertionError, ZeroDivisionError) as e:  # bad JSON, field, arch
        raise ModelLoadError(f"cannot use {folder / 'config.json'}: {e}") from e
    fields = {name: getattr(config, name) for name in ModelConfig.__dataclass_fields__}
    check_config_bounds(fields, str(folder / "config.json"))
    return config


def load_checkpoint(folder: Path, dtype: "torch.dtype | None" = None,
                    device: str = "cpu") -> tuple[ModelConfig, dict[str, "torch.Tensor"]]:
    """Config and memory-mapped weights (HF names) of a model folder; tied models get no lm_head.weight."""
    import torch
    from safetensors.torch import load_file

    dtype = dtype or torch.float32
    folder = Path(folder)
    config = read_config(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no *.safetensors weights")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(file, device=device))
        except Exception as e:  # SafetensorError, truncated header, ...
            raise ModelLoadError(f"{file} is not a valid safetensors file ({e})") from e
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    check_tensor_shapes(config, {name: tuple(t.shape) for name, t in tensors.items()}, str(folder))
    tensors = {name: t.to(dtype=dtype) if t.is_floating_point() else t for name, t in tensors.items()}
    return config, tensors
