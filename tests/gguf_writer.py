"""A GGUF from a transformers model, the way llama.cpp's convert_hf_to_gguf.py writes one: its tensor names,
Q/K rows permuted for its interleaved RoPE (llama, mistral, smollm3), Gemma's norms stored as 1 + w, Llama 3's
scaling as a `rope_freqs` tensor, Phi-3's LongRoPE as factor tensors; tokenizer metadata copied from the
default model's GGUF. Written independently of llmchat's reader, so the two check each other.
"""
from __future__ import annotations

import math
from pathlib import Path

import gguf
import numpy as np
import torch

from arch_cases import Case, llama3_rope_freqs

LAYER = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.qkv_proj": "attn_qkv",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "post_attention_layernorm": "ffn_norm",
}
GEMMA_LAYER = LAYER | {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                       "post_feedforward_layernorm": "post_ffw_norm"}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}


def llama_cpp_permute(w: np.ndarray, num_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half rows -> interleaved pairs."""
    return (w.reshape(num_heads, 2, w.shape[0] // num_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _copy_tokenizer(writer: gguf.GGUFWriter, tokenizer_gguf: Path) -> None:
    reader = gguf.GGUFReader(tokenizer_gguf)
    for name, f in reader.fields.items():
        if name.startswith("tokenizer."):
            sub = f.types[1] if len(f.types) > 1 else None
            writer.add_key_value(name, f.contents(), f.types[0], sub)


def write_gguf(model, case: Case, path: Path, tokenizer_gguf: Path) -> Path:
    cfg = model.config
    arch = case.gguf_arch
    gemma = arch.startswith("gemma")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rope = cfg.rope_parameters.get("full_attention", cfg.rope_parameters)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(rope["rope_theta"])
    rotary_dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
    w.add_rope_dimension_count(rotary_dim)
    if getattr(cfg, "sliding_window", None):
        w.add_sliding_window(cfg.sliding_window)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    elif kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    elif kind == "llama3":
        w.add_tensor("rope_freqs.weight", np.array(llama3_rope_freqs(rope, head_dim), dtype=np.float32))
    elif kind == "longrope":
        original = rope["original_max_position_embeddings"]
        scale = cfg.max_position_embeddings / original
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0)
        w.add_rope_scaling_orig_ctx_len(original)
        w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32))
    _copy_tokenizer(w, tokenizer_gguf)
    layer_names = GEMMA_LAYER if gemma else LAYER
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        data = t.detach().to(torch.float32).numpy().copy()
        if gemma and name.endswith("norm.weight"):
            data = data + 1.0
        if arch in ("llama", "smollm3") and name.endswith(("q_proj.weight", "q_proj.bias")):
            data = llama_cpp_permute(data, cfg.num_attention_heads)
        if arch in ("llama", "smollm3") and name.endswith(("k_proj.weight", "k_proj.bias")):
            data = llama_cpp_permute(data, cfg.num_key_value_heads)
        if name in TOP:
            out = TOP[name]
        else:
            parts = name.split(".")  # model.layers.N.<module...>.weight
            out = f"blk.{parts[2]}.{layer_names['.'.join(parts[3:-1])]}.{parts[-1]}"
        w.add_tensor(out, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
