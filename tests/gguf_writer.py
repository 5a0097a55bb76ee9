"""A GGUF from a transformers model, the way llama.cpp's convert_hf_to_gguf.py writes one: its tensor names,
Q/K rows permuted for its interleaved RoPE (llama, mistral, smollm3), Gemma 2/3's norms stored as 1 + w, Llama 3's
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
GEMMA4_LAYER = GEMMA_LAYER | {"per_layer_input_gate": "inp_gate", "per_layer_projection": "proj",
                              "post_per_layer_input_norm": "post_norm"}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight", "model.embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
       "model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
       "model.per_layer_projection_norm.weight": "per_layer_proj_norm.weight"}


def llama_cpp_permute(w: np.ndarray, num_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half rows -> interleaved pairs."""
    return (w.reshape(num_heads, 2, w.shape[0] // num_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _copy_tokenizer(writer: gguf.GGUFWriter, tokenizer_gguf: Path) -> None:
    reader = gguf.GGUFReader(tokenizer_gguf)
    for name, f in reader.fields.items():
        if name.startswith("tokenizer."):
            sub = f.types[1] if len(f.types) > 1 else None
            writer.add_key_value(name, f.contents(), f.types[0], sub)


def _gemma4_metadata(w: gguf.GGUFWriter, cfg) -> None:
    """What convert_hf_to_gguf.py's Gemma4Model writes beyond Gemma 3's: per-type head sizes and RoPE, the
    sliding layers as a pattern, KV sharing, per-layer embeddings, the double-wide MLP as per-layer lengths,
    and proportional RoPE as `rope_freqs` (1 for the turned pairs, 1e30 for the rest; full layers only)."""
    full, swa = cfg.layer_types.index("full_attention"), cfg.layer_types.index("sliding_attention")
    head_dim_full, head_dim_swa = cfg.per_layer_config[full].head_dim, cfg.per_layer_config[swa].head_dim
    w.add_key_length(head_dim_full)
    w.add_value_length(head_dim_full)
    w.add_key_length_swa(head_dim_swa)
    w.add_value_length_swa(head_dim_swa)
    w.add_sliding_window_pattern([t == "sliding_attention" for t in cfg.layer_types])
    w.add_shared_kv_layers(cfg.num_kv_shared_layers)
    w.add_embedding_length_per_layer_input(cfg.hidden_size_per_layer_input)
    first_shared = cfg.num_hidden_layers - cfg.num_kv_shared_layers
    w.add_feed_forward_length([cfg.intermediate_size * (2 if cfg.use_double_wide_mlp and i >= first_shared else 1)
                               for i in range(cfg.num_hidden_layers)] if cfg.use_double_wide_mlp else cfg.intermediate_size)
    w.add_rope_freq_base_swa(cfg.rope_parameters["sliding_attention"]["rope_theta"])
    w.add_rope_dimension_count(head_dim_full)
    w.add_rope_dimension_count_swa(head_dim_swa)
    w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    num_turned = int(head_dim_full * cfg.rope_parameters["full_attention"]["partial_rotary_factor"] / 2)
    freqs = [1.0] * num_turned + [1e30] * (head_dim_full // 2 - num_turned)
    w.add_tensor("rope_freqs.weight", np.array(freqs, dtype=np.float32))


def write_gguf(model, case: Case, path: Path, tokenizer_gguf: Path) -> Path:
    cfg = model.config
    arch = case.gguf_arch
    gemma = arch in ("gemma2", "gemma3")  # norms stored as 1 + w
    head_dim = (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads) if arch != "gemma4" else 0
    rope = cfg.rope_parameters.get("full_attention", cfg.rope_parameters)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(rope["rope_theta"])
    if getattr(cfg, "sliding_window", None):
        w.add_sliding_window(cfg.sliding_window)
    if arch == "gemma4":
        _gemma4_metadata(w, cfg)
    else:
        w.add_feed_forward_length(cfg.intermediate_size)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 1.0)))
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
    layer_names = GEMMA4_LAYER if arch == "gemma4" else GEMMA_LAYER if gemma else LAYER
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings or name.endswith("embed_scale"):
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
        elif name.endswith("layer_scalar"):
            out = f"blk.{name.split('.')[2]}.layer_output_scale.weight"
        else:
            parts = name.split(".")  # model.layers.N.<module...>.weight
            out = f"blk.{parts[2]}.{layer_names['.'.join(parts[3:-1])]}.{parts[-1]}"
        w.add_tensor(out, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
