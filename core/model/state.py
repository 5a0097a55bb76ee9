"""Hugging Face-named tensors into the model: q/k/v and gate/up fused as they arrive, Gemma's norms offset.

The state holds Hugging Face's names and values for every architecture (a GGUF's tensors are mapped to
them by core/weights/gguf_arch.py): Phi-3 ships q/k/v and gate/up already fused, the others separately.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .model import Transformer


FUSED_PARTS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


@torch.no_grad()
def load_state(model: "Transformer", state: Mapping[str, torch.Tensor]) -> None:
    """Copy every tensor of `state` into `model`; ValueError on a stray or missing one."""
    own = dict(model.named_parameters())
    seen: set[str] = set()
    cfg = model.config

    def fused(layer: int, part: str) -> tuple[str, int]:
        """The fused parameter a q/k/v or gate/up tensor of `layer` goes into, and its first row there."""
        q_size = cfg.num_attention_heads * cfg.head_dim_of(layer)
        kv_size = cfg.num_key_value_heads * cfg.head_dim_of(layer)
        return {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", q_size), "v_proj": ("qkv_proj", q_size + kv_size),
                "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", cfg.intermediate_size_of(layer))}[part]

    def put(name: str, tensor: torch.Tensor, row_offset: int = 0) -> None:
        param = own[name]
        if name.endswith("norm.weight") and cfg.norm_weight_offset:
            tensor = tensor.float() + cfg.norm_weight_offset  # Gemma computes x * (1 + w): fold the 1 in once
        param[row_offset : row_offset + tensor.shape[0]].copy_(tensor)
        seen.add(name)

    for hf_name in state:
        tensor = state[hf_name]
        name = hf_name.removeprefix("model.")
        parts = name.split(".")
        if len(parts) >= 4 and parts[-2] in FUSED_PARTS:
            target, offset = fused(int(parts[1]), parts[-2])
            put(".".join([*parts[:-2], target, parts[-1]]), tensor, offset)
        elif name in own:
            put(name, tensor)
        elif name.endswith("rotary_emb.inv_freq"):
            continue
        else:
            raise ValueError(f"unexpected tensor {hf_name!r} in checkpoint")
    missing = set(own) - seen
    if missing:
        raise ValueError(f"checkpoint lacks {sorted(missing)[0]!r} (and {len(missing) - 1} more)")
