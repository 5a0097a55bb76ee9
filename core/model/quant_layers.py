"""The model's layers on GGUF-quantized weights: a linear and the (tied) embedding that keep the file's blocks.

Both hold `QuantWeight`s (kernels/quant_blocks.py) and compute through `kernels/ops.py`: integer dots on the
quantized bytes for a few rows, dequantize-a-tile + GEMM for many (the C++ kernels, built on first use, where
a compiler exists; the torch reference otherwise). One `QuantContext` per model carries the loaded kernels and
the scratch buffer of the many-rows path, shared by all its quantized layers (a model runs one forward at a time).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch
from torch import nn

from ...kernels import ops
from ...kernels.quant_blocks import QuantWeight


@dataclass(slots=True)
class QuantContext:
    cpu_kernels: ModuleType | None  # from kernels/quant_cpu_build.load_cpu_kernels; None: the torch path
    scratch: torch.Tensor  # fp32, for the many-rows path (kernels/quant_linear.scratch_elements)


class QuantLinear(nn.Module):
    """y = x W^T + b with W the row-concatenation of `parts` (fused q/k/v or gate/up whose block types
    differ stay separate parts, one kernel call each)."""

    def __init__(self, parts: list[QuantWeight], bias: torch.Tensor | None, ctx: QuantContext) -> None:
        super().__init__()
        assert parts and all(p.in_features == parts[0].in_features for p in parts)
        self.parts = parts
        self.in_features = parts[0].in_features
        self.out_features = sum(p.out_features for p in parts)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.ctx = ctx

    def prepack(self) -> None:  # the blocks are used as stored
        pass

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [ops.quant_linear(x, p, self.ctx.cpu_kernels, self.ctx.scratch) for p in self.parts]
        y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)  # [num_rows, out_features]
        return y if self.bias is None else y.add_(self.bias)


class QuantEmbedding(nn.Module):
    """Rows of a quantized table, dequantized on lookup; the same table is the tied output head."""

    def __init__(self, table: QuantWeight, dtype: torch.dtype, ctx: QuantContext) -> None:
        super().__init__()
        self.table = table
        self.dtype = dtype
        self.ctx = ctx

    @property
    def nbytes(self) -> int:
        return self.table.nbytes

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return ops.dequantize_rows(self.table, ids, self.ctx.cpu_kernels).to(self.dtype)  # [num_ids, dim]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return ops.quant_linear(hidden, self.table, self.ctx.cpu_kernels, self.ctx.scratch)  # [num_rows, vocab]


def merge_parts(parts: list[QuantWeight]) -> list[QuantWeight]:
    """Neighbouring parts of one block type concatenated by rows (one kernel call instead of several)."""
    merged: list[QuantWeight] = []
    for p in parts:
        if merged and merged[-1].qtype == p.qtype:
            last = merged.pop()
            p = QuantWeight(p.qtype, torch.cat([last.data, p.data]), last.out_features + p.out_features,
                            p.in_features)
        merged.append(p)
    return merged
