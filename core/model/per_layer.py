"""Gemma 4's per-layer embeddings (PLE): beside the residual stream, every layer gets a small vector of its own.

Per token, a second embedding table holds `num_layers * per_layer_input_size` numbers (scaled by
sqrt(per_layer_input_size)); a projection of the token's (scaled) main embedding, divided by sqrt(hidden) and
RMS-normalized per layer, is added and the sum halved in power (times 2 ** -0.5). After its MLP block, layer
i gates its slice: x + norm(proj(gelu(gate(x)) * ple_i)).

The modules keep Hugging Face's names on the model and on each layer (`embed_tokens_per_layer`,
`per_layer_model_projection`, `per_layer_projection_norm`; `per_layer_input_gate`, `per_layer_projection`,
`post_per_layer_input_norm`), so checkpoints load by name.
"""
from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from .layers import Embedding, Linear


def add_per_layer_embeddings(model: nn.Module, cfg: ModelConfig, weight_dtype: torch.dtype, dtype: torch.dtype) -> None:
    """The model-level modules of PLE, on `model` (a Transformer)."""
    from .model import RMSNorm  # model.py imports this file

    size = cfg.num_hidden_layers * cfg.per_layer_input_size
    model.embed_tokens_per_layer = Embedding(cfg.vocab_size, size, weight_dtype, dtype)
    model.per_layer_model_projection = Linear(cfg.hidden_size, size, False, weight_dtype)
    model.per_layer_projection_norm = RMSNorm(cfg.per_layer_input_size, cfg.rms_norm_eps)


def per_layer_inputs(model: nn.Module, input_ids: torch.Tensor, x: torch.Tensor, kv) -> torch.Tensor:
    """`[num_tokens, num_layers, per_layer_input_size]`: each layer's input, from the ids and the scaled
    embeddings `x` `[num_tokens, hidden]`."""
    cfg = model.config
    shape = (x.shape[0], cfg.num_hidden_layers, cfg.per_layer_input_size)
    scale = torch.tensor(cfg.per_layer_input_size ** 0.5, dtype=x.dtype)  # rounded as Hugging Face rounds it
    from_ids = (model.embed_tokens_per_layer(input_ids) * scale).view(shape)
    projected = model.per_layer_model_projection(x) * cfg.hidden_size ** -0.5
    projected = model.per_layer_projection_norm(projected.view(shape), None, kv)
    return (projected + from_ids) * 2.0 ** -0.5


def add_per_layer_input_gate(layer: nn.Module, cfg: ModelConfig, weight_dtype: torch.dtype) -> None:
    """One layer's PLE modules, on `layer` (a DecoderLayer)."""
    from .model import RMSNorm

    layer.per_layer_input_gate = Linear(cfg.hidden_size, cfg.per_layer_input_size, False, weight_dtype)
    layer.per_layer_projection = Linear(cfg.per_layer_input_size, cfg.hidden_size, False, weight_dtype)
    layer.post_per_layer_input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def apply_per_layer_input(layer: nn.Module, x: torch.Tensor, per_layer_input: torch.Tensor, kv) -> torch.Tensor:
    """x `[num_tokens, hidden]` (the residual stream after the layer's MLP) plus its gated per-layer input."""
    gated = layer.act(layer.per_layer_input_gate(x)) * per_layer_input  # [num_tokens, per_layer_input_size]
    return x + layer.post_per_layer_input_norm(layer.per_layer_projection(gated), None, kv)
