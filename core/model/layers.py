"""The weight-holding building blocks of the model: a linear projection and an embedding table."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ...kernels.linear import linear, prepack_linear_weight


class Linear(nn.Module):
    """y = x W^T + b. The weight may be stored in another dtype than the activations (bf16 weights, fp32
    activations); prepack() reorders it once for oneDNN where that pays (kernels/linear.py) and then drops
    the plain copy, so one copy of every weight stays in memory.

    Weights start uninitialized (torch.empty): they are loaded, or set by init_random_weights in tests."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 weight_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=weight_dtype))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.packed: torch.Tensor | None = None

    def prepack(self) -> None:
        if self.weight is None:
            return
        self.packed = prepack_linear_weight(self.weight.data)
        if self.packed is not None:
            self.weight = None  # the packed copy is the only one kept

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.packed)


class Embedding(nn.Module):
    """A table in the weight dtype; rows come out in the activation dtype."""

    def __init__(self, num_embeddings: int, dim: int, weight_dtype: torch.dtype | None, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim, dtype=weight_dtype))
        self.dtype = dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight).to(self.dtype)
