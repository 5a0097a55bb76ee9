"""GGUF -> a Hugging Face-layout folder: llama tensor names, dequantized fp32 weights, config and tokenizer files.

Every metadata number is checked against `check_config_bounds` and the tensor shapes against the config
before anything is dequantized, so a hostile header costs no more memory than the file's own tensors.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import check_config_bounds, check_count, check_tensor_shapes
from ..config import ModelConfig
from .errors import ModelLoadError
from .gguf_meta import gguf_value, open_gguf

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize a llama GGUF into `out_dir` (fp32 safetensors + config + tokenizer files), atomically."""
    from .cache import write_entry

    reader = open_gguf(gguf_path)
    arch = gguf_value(reader, "general.architecture")
    if arch != "llama":
        raise ModelLoadError(f"unsupported architecture {arch!r} in {gguf_path}: llmchat converts llama GGUF files "
                             "(or loads a Hugging Face LlamaForCausalLM / Qwen2ForCausalLM folder)")
    names = [hf_name(t.name, gguf_path) for t in reader.tensors]
    config = config_from_gguf(reader, gguf_path, tied="lm_head.weight" not in names)
    shapes = {name: tuple(int(d) for d in reversed(t.shape)) for name, t in zip(names, reader.tensors)}
    check_tensor_shapes(config, shapes, str(gguf_path))  # GGUF lists dims innermost first
    tensors = {name: dequantize_tensor(t, shapes[name], gguf_path) for name, t in zip(names, reader.tensors)}
    for i in range(config.num_hidden_layers):  # llama.cpp's RoPE row order -> rotate-half order
        for proj, num_heads in (("q_proj", config.num_attention_heads), ("k_proj", config.num_key_value_heads)):
            for kind in ("weight", "bias"):
                if (name := f"model.layers.{i}.self_attn.{proj}.{kind}") in tensors:
                    tensors[name] = unpermute_qk(tensors[name], num_heads)
    files = {"config.json": json.dumps(config.to_hf_dict(), indent=2), **tokenizer_files(reader, gguf_path)}
    write_entry(out_dir, tensors, files, source=gguf_path.name)


def unpermute_qk(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (interleaved RoPE pairs) so rotate-half RoPE applies."""
    rows = w.shape[0]
    return np.ascontiguousarray(w.reshape(num_heads, rows // num_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2)
                                .reshape(w.shape))


def hf_name(name: str, path: Path) -> str:
    base, _, kind = name.rpartition(".")
    if kind in ("weight", "bias"):
        if base in _TOP_NAMES:
            return f"{_TOP_NAMES[base]}.{kind}"
        if (m := re.fullmatch(r"blk\.(\d+)\.(\w+)", base)) and m.group(2) in _LAYER_NAMES:
            return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{kind}"
    raise ModelLoadError(f"unsupported tensor {name!r} in {path}: llmchat converts plain llama GGUF files")


def dequantize_tensor(t: Any, shape: tuple[int, ...], path: Path) -> np.ndarray:
    from gguf.quants import dequantize

    try:
        w = dequantize(t.data, t.tensor_type)
    except NotImplementedError as e:
        raise ModelLoadError(f"unsupported tensor type {t.tensor_type.name} in tensor {t.name} of {path}: llmchat "
                             "reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and K-quant tensors") from e
    return np.ascontiguousarray(w.reshape(shape), dtype=np.float32)


def _f32(value: Any) -> float:
    return float(str(np.float32(value)))  # 9.999999747e-06 stored as f32 -> 1e-05, as in the HF config


def _int(value: Any) -> Any:
    """An integer metadata value as int; anything else as it is, for `check_config_bounds` to name."""
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value


def config_from_gguf(reader: Any, path: Path, tied: bool) -> ModelConfig:
    def need(key: str) -> Any:
        if (value := gguf_value(reader, key)) is None:
            raise ModelLoadError(f"{path} lacks the metadata {key}: it is not a complete llama GGUF file")
        return _int(value)

    tokens = reader.fields.get("tokenizer.ggml.tokens")
    values: dict[str, Any] = {
        "vocab_size": len(tokens.data) if tokens is not None else need("llama.vocab_size"),
        "hidden_size": need("llama.embedding_length"),
        "intermediate_size": need("llama.feed_forward_length"),
        "num_hidden_layers": need("llama.block_count"),
        "num_attention_heads": need("llama.attention.head_count"),
        "max_position_embeddings": _int(gguf_value(reader, "llama.context_length", 2048)),
    }
    values["num_key_value_heads"] = _int(gguf_value(reader, "llama.attention.head_count_kv",
                                                    values["num_attention_heads"]))
    for name in ("hidden_size", "num_attention_heads"):  # before dividing one by the other
        check_count(name, values[name], str(path))
    values["head_dim"] = _int(gguf_value(reader, "llama.attention.key_length",
                                         values["hidden_size"] // values["num_attention_heads"]))
    bos, eos = gguf_value(reader, "tokenizer.ggml.bos_token_id"), (
        gguf_value(reader, "tokenizer.ggml.eos_token_id"), gguf_value(reader, "tokenizer.ggml.eot_token_id"))
    try:
        values |= {
            "rms_norm_eps": _f32(gguf_value(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
            "rope_theta": _f32(gguf_value(reader, "llama.rope.freq_base", 10000.0)),
            "bos_token_id": None if bos is None else int(bos),
            "eos_token_ids": tuple(dict.fromkeys(int(i) for i in eos if i is not None)),
        }
    except (TypeError, ValueError) as e:  # e.g. a string where a number belongs
        raise ModelLoadError(f"{path} has llama metadata llmchat cannot use ({e})") from e
    check_config_bounds(values, str(path))  # e.g. per-layer head counts (a list) where llama has one number
    return ModelConfig(architecture="LlamaForCausalLM", tie_word_embeddings=tied, **values)


def tokenizer_files(reader: Any, path: Path) -> dict[str, str]:
    from .gguf_tokenizer import tokenizer_files_from_gguf

    try:
        return tokenizer_files_from_gguf(reader)
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelLoadError(f"cannot build a tokenizer from {path} ({type(e).__name__}: {e})") from e
