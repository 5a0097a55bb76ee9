"""The model's decoder layers handed to the C++ decode stack (kernels/csrc/decode_stack.cpp): a decode step of
one token per sequence in one call instead of ~15 Python-level ops per layer.

It is the same computation as Transformer.forward on the C++ kernels, op for op (same kernels, same order:
the same bits, tests/test_decode_stack.py), for the models it knows: GGUF-quantized projections, pre-norm
blocks, SwiGLU, embeddings not scaled; anything else (Gemma's sandwich norms and GeGLU, float weights, the
torch path) keeps the Python forward. Only rows below the many-rows GEMM's threshold take it, since from there
on the Python path multiplies differently.
"""
from __future__ import annotations

from types import ModuleType

import torch

from ...kernels.quant_linear import GEMM_MIN_ROWS, qtype_number
from .model import Transformer
from .quant_layers import QuantLinear

MAX_ROWS = GEMM_MIN_ROWS - 1  # the int8 dots' rows (from GEMM_MIN_ROWS on, Python dequantizes + GEMMs)


def _parts(linear: QuantLinear) -> list[tuple[torch.Tensor, int, int, int]]:
    return [(p.data, qtype_number(p.qtype), p.out_features, p.in_features) for p in linear.parts]


def supported(model: Transformer) -> str | None:
    """None where the stack can run this model, else why not."""
    cfg = model.config
    if model.cpu_kernels is None or not hasattr(model.cpu_kernels, "DecodeStack"):
        return "no C++ kernels"
    if cfg.sandwich_norms or cfg.hidden_act != "silu" or cfg.embedding_scale != 1.0:
        return "a block kind it does not know (sandwich norms, GeGLU, scaled embeddings)"
    if cfg.per_layer_input_size or cfg.value_norm or cfg.layer_scalar or any(
            cfg.kv_source_of(i) != i or cfg.head_dim_of(i) != cfg.head_dim for i in range(cfg.num_hidden_layers)):
        return "per-layer inputs, value norms, layer scalars, shared KV or head sizes per layer (Gemma 4)"
    if model.dtype != torch.float32:
        return f"activations in {model.dtype}"
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if not all(isinstance(m, QuantLinear) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)):
            return "projections that are not GGUF-quantized"
        if any(m.bias is not None for m in (attn.o_proj, mlp.gate_up_proj, mlp.down_proj)):
            return "biases beside q/k/v"
    return None


def build_decode_stack(model: Transformer) -> object | None:
    """The C++ stack over the model's own weights (no copies), or None where `supported` says no."""
    if supported(model) is not None:
        return None
    cfg = model.config
    kernels: ModuleType = model.cpu_kernels  # type: ignore[assignment]
    stack = kernels.DecodeStack(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps,
                                cfg.attention_scale, model.norm.weight.data)
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        rope = None if attn.rope_table is None else model.rope_tables[attn.rope_table]
        stack.add_layer(
            layer.input_layernorm.weight.data, layer.post_attention_layernorm.weight.data, _parts(attn.qkv_proj),
            None if attn.qkv_proj.bias is None else attn.qkv_proj.bias.data, _parts(attn.o_proj),
            _parts(mlp.gate_up_proj), _parts(mlp.down_proj),
            None if attn.q_norm is None else attn.q_norm.weight.data,
            None if attn.k_norm is None else attn.k_norm.weight.data, rope, attn.window, attn.softcap)
    return stack
