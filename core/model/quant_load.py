"""Build the model from a tensor source keeping GGUF block types as stored (the `auto` weight format of a GGUF).

Each linear whose tensors are of a block type the kernels compute (kernels/quant_blocks.BLOCK_LAYOUTS) becomes
a `QuantLinear` (fused q/k/v and gate/up: row-concatenated where the types agree); the embedding, if
quantized, a `QuantEmbedding` that is also the tied head. Anything else (F16/BF16/F32 tensors) is dequantized
to fp32 at load and takes the fp32 path. Norms and biases are fp32 (the activation dtype).

The model is made on the meta device first, so the fp32 storage of the linears it replaces is never allocated:
resident memory is the file's tensors plus the fp32 ones.
"""
from __future__ import annotations

import re
from types import ModuleType

import torch
from torch import nn

from ...kernels.quant_blocks import BLOCK_LAYOUTS, QuantWeight
from ...kernels.quant_linear import scratch_elements
from ..config import ModelConfig
from ..weights.errors import ModelLoadError
from ..weights.tensor_source import StoredTensor, dequantize_stored
from .model import Embedding, Linear, Transformer
from .rope import rope_tables
from .quant_layers import QuantContext, QuantEmbedding, QuantLinear, merge_parts

_FUSED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
          "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
_NUM_PARTS = {"qkv_proj": 3, "gate_up_proj": 2}


def build_quantized_model(cfg: ModelConfig, source, dtype: torch.dtype,
                          cpu_kernels: ModuleType | None) -> Transformer:
    """The model of `cfg` from `source` (an iterable of StoredTensor, e.g. weights/tensor_source.GGUFSource)."""
    with torch.device("meta"):
        model = Transformer(cfg, dtype, torch.float32)
    ctx = QuantContext(cpu_kernels, torch.empty(0))
    pending: dict[str, dict[int, StoredTensor]] = {}  # fused linear -> its parts so far
    for t in source:
        name = t.name.removeprefix("model.")
        if (m := re.fullmatch(r"(layers\.\d+\.\w+)\.(\w+)\.(weight|bias)", name)) and m.group(2) in _FUSED:
            target, index = _FUSED[m.group(2)]
            key = f"{m.group(1)}.{target}.{m.group(3)}"
            pending.setdefault(key, {})[index] = t
            num_parts = _num_parts(model, m.group(1), target)
            if len(pending[key]) == num_parts:
                parts = pending.pop(key)
                _place(model, key, [parts[i] for i in range(num_parts)], ctx)
        else:
            _place(model, name, [t], ctx)
    if pending:
        raise ModelLoadError(f"the checkpoint lacks part of {sorted(pending)[0]}")
    _finish(model, ctx, dtype)
    return model


def _num_parts(model: Transformer, module: str, target: str) -> int:
    """How many tensors the fused `target` of `module` (layers.N.self_attn / layers.N.mlp) is made of: q alone
    in a layer that reads another layer's K/V (Gemma 4)."""
    if target == "qkv_proj" and not model.get_submodule(module).kv_size:
        return 1
    return _NUM_PARTS[target]


def _place(model: Transformer, name: str, parts: list[StoredTensor], ctx: QuantContext) -> None:
    """Put the tensor(s) for parameter `name` (a fused one: its parts in row order) into the model."""
    module_name, _, kind = name.rpartition(".")
    try:
        module = model.get_submodule(module_name)
    except AttributeError:
        raise ModelLoadError(f"unexpected tensor {parts[0].name!r} in the checkpoint") from None
    parent_name, _, attr = module_name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    if kind == "bias":  # before or after its weight: the module there keeps it
        module.bias = nn.Parameter(torch.cat([dequantize_stored(p) for p in parts]).to(model.dtype),
                                   requires_grad=False)
        return
    if not (isinstance(module, Linear | Embedding) and module.weight is not None and module.weight.is_meta):
        if isinstance(module, Linear | Embedding | QuantLinear | QuantEmbedding):
            raise ModelLoadError(f"the checkpoint holds {parts[0].name!r} twice")
        value = dequantize_stored(parts[0])
        if name.endswith("norm.weight") and model.config.norm_weight_offset:
            value = value + model.config.norm_weight_offset  # Gemma computes x * (1 + w): fold the 1 in, as load_state does
        setattr(module, kind, nn.Parameter(value.to(model.dtype), requires_grad=False))
        return
    quantized = all(p.kind in BLOCK_LAYOUTS and len(p.shape) == 2 for p in parts)
    new: nn.Module
    if isinstance(module, Embedding):
        (t,) = parts
        if quantized:
            new = QuantEmbedding(QuantWeight(t.kind, t.data, *t.shape), model.dtype, ctx)
        else:
            new = Embedding(*t.shape, torch.float32, model.dtype)
            new.weight = nn.Parameter(dequantize_stored(t), requires_grad=False)
    elif quantized:
        new = QuantLinear(merge_parts([QuantWeight(p.kind, p.data, *p.shape) for p in parts]), None, ctx)
    else:
        new = Linear(module.in_features, module.out_features, False, torch.float32)
        new.weight = nn.Parameter(torch.cat([dequantize_stored(p) for p in parts]), requires_grad=False)
        new.prepack()
    if isinstance(module, Linear):
        new.bias = module.bias  # None, a meta placeholder still to come, or the bias that came first
    setattr(parent, attr, new)


def _finish(model: Transformer, ctx: QuantContext, dtype: torch.dtype) -> None:
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.device.type == "meta":
            raise ModelLoadError(f"the checkpoint lacks {name!r}")
    weights = [p for m in model.modules() if isinstance(m, QuantLinear) for p in m.parts]
    if isinstance(model.embed_tokens, QuantEmbedding) and model.lm_head is None:
        weights.append(model.embed_tokens.table)
    ctx.scratch = torch.empty(scratch_elements(weights))  # [elements], fp32; pages are touched on first use
    model.rope_tables = rope_tables(model.config)
    model.tied_head_packed = None
    model.eval().requires_grad_(False)
