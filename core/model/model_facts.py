"""The facts of a loaded model (core/api/model_facts.py), counted from what is in memory, not from a file name.

Parameters: every tensor the model holds, element by element — nn.Parameters (norms, biases, dense weights;
a tied embedding is one Parameter, counted once), the packed copy of a dense projection (its plain weight is
dropped after prepacking) and the GGUF blocks of a quantized one (QuantWeight, not a Parameter). Weight types:
each layer matrix's block type (QuantWeight.qtype) or dtype, weighted by its elements; the embedding and an
untied output head are named apart, as llama.cpp's files keep them in another type.
"""
from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from ...kernels.quant_blocks import QuantWeight
from ..api.model_facts import ModelFacts
from ..hf_config import ARCHITECTURES
from .model import Embedding, Linear
from .quant_layers import QuantEmbedding, QuantLinear


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _matrices(module: nn.Module) -> list[tuple[str, int]]:
    """(type, elements) of the weight matrices a projection or embedding holds."""
    if isinstance(module, QuantLinear):
        return [(p.qtype, p.out_features * p.in_features) for p in module.parts]
    if isinstance(module, QuantEmbedding):
        table: QuantWeight = module.table
        return [(table.qtype, table.out_features * table.in_features)]
    if isinstance(module, Linear):
        if module.packed is not None:  # the packed copy is the weight now (same element count)
            return [(dtype_name(module.packed.dtype), module.in_features * module.out_features)]
        return [(dtype_name(module.weight.dtype), module.weight.numel())]
    if isinstance(module, Embedding):
        return [(dtype_name(module.weight.dtype), module.weight.numel())]
    return []


def count_params(model: nn.Module) -> int:
    """Elements of every tensor loaded: Parameters once each (parameters() skips a shared one) plus the
    weights kept outside Parameters (packed or quantized)."""
    total = sum(p.numel() for p in model.parameters())
    for module in model.modules():
        if isinstance(module, (QuantLinear, QuantEmbedding)) or (isinstance(module, Linear) and module.packed is not None):
            total += sum(n for _, n in _matrices(module))
    return total


def shown_name(name: str, kinds: set[str]) -> str:
    """The model's name without a file's ".gguf" and a trailing weight type the facts name anyway
    ("SmolLM2-135M-Instruct.Q4_1.gguf" holding Q4_1 -> "SmolLM2-135M-Instruct"); other names as they are."""
    name = name.removesuffix(".gguf")
    for kind in kinds:
        for sep in (".", "-", "_"):
            if name.lower().endswith((sep + kind).lower()) and len(name) > len(kind) + 1:
                return name[: -len(kind) - 1]
    return name


def model_facts(loaded, name: str | None = None) -> ModelFacts:
    """Facts of a LoadedModel (core/model/loader.py); `name` as the UI shows it (default: the folder's)."""
    cfg, model = loaded.config, loaded.model
    layers: Counter[str] = Counter()
    for layer in model.layers:
        for module in layer.modules():
            for kind, n in _matrices(module):
                layers[kind] += n
    total = sum(layers.values())
    shares = tuple((kind, n / total) for kind, n in layers.most_common())
    embedding = _matrices(model.embed_tokens)[0][0]
    output = _matrices(model.lm_head)[0][0] if model.lm_head is not None else None
    return ModelFacts(
        name=shown_name(name or loaded.folder.name, set(layers)), architecture=ARCHITECTURES.get(cfg.architecture, cfg.architecture),
        num_params=count_params(model), weight_types=shares, embedding_type=embedding, output_type=output,
        context_length=cfg.max_position_embeddings, num_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size,
    )
