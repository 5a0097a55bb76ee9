"""What llama.cpp's GGUF files mean, per architecture: tensor names -> Hugging Face names, and how a stored
tensor differs from Hugging Face's (Q/K rows permuted for llama.cpp's interleaved RoPE; Gemma's norms
stored as 1 + w). Any loader calls this (the converter today, a quantized tensor source tomorrow);
metadata -> ModelConfig lives beside it in gguf_config.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .errors import ModelLoadError

_COMMON_LAYER = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_qkv": "self_attn.qkv_proj",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "ffn_norm": "post_attention_layernorm",
}
_GEMMA_LAYER = _COMMON_LAYER | {
    "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_GEMMA4_LAYER = _GEMMA_LAYER | {
    "inp_gate": "per_layer_input_gate", "proj": "per_layer_projection", "post_norm": "post_per_layer_input_norm",
    "layer_output_scale": "layer_scalar",  # a bare Hugging Face name: no .weight
}
_BARE = ("layer_scalar",)
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
        "per_layer_token_embd": "model.embed_tokens_per_layer", "per_layer_model_proj": "model.per_layer_model_projection",
        "per_layer_proj_norm": "model.per_layer_projection_norm"}
# tensors that carry RoPE parameters, not weights (read into the config by gguf_config.py)
ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


@dataclass(frozen=True, slots=True)
class GGUFArch:
    name: str  # llama.cpp's general.architecture
    hf_architecture: str
    layer_names: dict[str, str] = field(default_factory=lambda: _COMMON_LAYER)
    rope_permuted: bool = False  # Q/K rows stored in llama.cpp's interleaved-pair order (LLAMA rope type)
    norm_shift: float = 0.0  # llama.cpp stores every norm weight plus this (Gemma: 1)


ARCHES = {a.name: a for a in (
    GGUFArch("llama", "LlamaForCausalLM", rope_permuted=True),  # Mistral and Ministral GGUFs are "llama" too
    GGUFArch("qwen2", "Qwen2ForCausalLM"),
    GGUFArch("qwen3", "Qwen3ForCausalLM"),
    GGUFArch("phi3", "Phi3ForCausalLM", _COMMON_LAYER | {"ffn_up": "mlp.gate_up_proj"}),  # gate and up fused
    GGUFArch("gemma2", "Gemma2ForCausalLM", _GEMMA_LAYER, norm_shift=1.0),
    GGUFArch("gemma3", "Gemma3ForCausalLM", _GEMMA_LAYER, norm_shift=1.0),
    GGUFArch("gemma4", "Gemma4ForCausalLM", _GEMMA4_LAYER),  # norms stored as Hugging Face holds them
    GGUFArch("smollm3", "SmolLM3ForCausalLM", rope_permuted=True),
)}


def gguf_arch(name: object, where: str) -> GGUFArch:
    if not isinstance(name, str) or name not in ARCHES:
        raise ModelLoadError(f"unsupported architecture {name!r} in {where}: llmchat runs GGUF files of "
                             f"{', '.join(ARCHES)}")
    return ARCHES[name]


def hf_name(arch: GGUFArch, gguf_name: str, where: str) -> str | None:
    """The Hugging Face name of a GGUF tensor; None for a RoPE-parameter tensor (not a weight)."""
    if gguf_name in ROPE_TENSORS:
        return None
    base, _, kind = gguf_name.rpartition(".")
    if kind in ("weight", "bias"):
        if base in _TOP:
            return f"{_TOP[base]}.{kind}"
        if (m := re.fullmatch(r"blk\.(\d+)\.(\w+)", base)) and m.group(2) in arch.layer_names:
            name = arch.layer_names[m.group(2)]
            return f"model.layers.{m.group(1)}.{name}" + ("" if name in _BARE else f".{kind}")
    raise ModelLoadError(f"unsupported tensor {gguf_name!r} in {where}: not part of a {arch.name} model "
                         "as llmchat knows it")


def unpermute_qk(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (interleaved RoPE pairs) so rotate-half RoPE applies."""
    rows = w.shape[0]
    return np.ascontiguousarray(w.reshape(num_heads, rows // num_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2)
                                .reshape(w.shape))


def needs_unpermute(arch: GGUFArch, name: str) -> str | None:
    """"q" or "k" when the Hugging Face-named tensor `name` is stored in llama.cpp's RoPE row order."""
    if arch.rope_permuted and (m := re.search(r"self_attn\.([qk])_proj\.(weight|bias)$", name)):
        return m.group(1)
    return None


def to_hf_values(arch: GGUFArch, name: str, w: np.ndarray, num_heads: int, num_kv_heads: int) -> np.ndarray:
    """A dequantized tensor (Hugging Face name) as Hugging Face holds it: rows un-permuted, norms unshifted.
    Row permutation and quantization commute (blocks lie within rows), so a quantized source may instead
    permute its rows' blocks with the same index."""
    if (which := needs_unpermute(arch, name)) is not None:
        return unpermute_qk(w, num_heads if which == "q" else num_kv_heads)
    if arch.norm_shift and name.endswith("norm.weight"):
        return w - np.float32(arch.norm_shift)
    return w
