"""The Llama-family decoder (Llama, SmolLM, Qwen2): RMSNorm, RoPE, GQA attention, SwiGLU MLP.

Tokens are packed flat, `[num_tokens, hidden]`, with no batch dimension: a step may hold the new
tokens of many sequences. Attention goes through one object passed into forward (`KVContext`), so
the same model runs on a dense per-sequence cache (core/dense.py) or the paged cache (core/attention.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch
from torch import nn
from torch.nn import functional as F

from ..config import ModelConfig
from ...kernels import ops
from ...kernels.linear import linear, prepack_linear_weight
from .quant_layers import QuantEmbedding, QuantLinear


class KVContext(Protocol):
    """Where a layer's K/V go and how its attention reads them back, and which kernel backend every op of
    this forward uses (resolved once by whoever builds the context: "torch" or "triton")."""

    backend: str

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q `[num_tokens, num_q_heads, head_dim]`, k/v `[num_tokens, num_kv_heads, head_dim]` (RoPE applied);
        stores k/v, attends causally over the sequence's whole context, returns `[num_tokens, num_q_heads, head_dim]`."""
        ...


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


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, backend: str):
        return ops.rms_norm(x, self.weight, self.eps, residual, backend=backend)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int, weight_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        # q, k and v projections fused into one matmul (rows: q, then k, then v)
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, cfg.attention_bias, weight_dtype)
        self.o_proj = Linear(self.q_size, cfg.hidden_size, False, weight_dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, kv: KVContext) -> torch.Tensor:
        num_tokens = x.shape[0]
        qkv = self.qkv_proj(x)  # [num_tokens, q_size + 2 * kv_size]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        q, k = ops.rope(q, k, positions, cos_sin, backend=kv.backend)
        out = kv.attend(self.layer_idx, q, k, v)  # [num_tokens, num_heads, head_dim]
        return self.o_proj(out.reshape(num_tokens, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, weight_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.intermediate_size = cfg.intermediate_size
        self.gate_up_proj = Linear(cfg.hidden_size, 2 * cfg.intermediate_size, False, weight_dtype)  # gate, up
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, False, weight_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int, weight_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx, weight_dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, weight_dtype)

    def forward(self, x, residual, positions, cos_sin, kv: KVContext):
        if residual is None:
            residual = x
            h = self.input_layernorm(x, None, kv.backend)
        else:
            h, residual = self.input_layernorm(x, residual, kv.backend)
        h = self.self_attn(h, positions, cos_sin, kv)
        h, residual = self.post_attention_layernorm(h, residual, kv.backend)
        return self.mlp(h), residual


class Transformer(nn.Module):
    """forward(input_ids, positions, kv) -> final hidden states; compute_logits(hidden) -> logits.

    `dtype` is the activation (and KV cache) dtype; `weight_dtype` the storage of the projection and
    embedding weights (the same by default; bf16 weights with fp32 activations is the CPU fast format)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype = torch.float32,
                 weight_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        weight_dtype = weight_dtype or dtype
        self.config = cfg
        self.dtype = dtype
        self.weight_dtype = weight_dtype
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, weight_dtype, dtype)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, weight_dtype) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else Linear(cfg.hidden_size, cfg.vocab_size, False, weight_dtype)
        for module in self.modules():  # norms and biases live in the activation dtype
            if isinstance(module, RMSNorm):
                module.weight.data = module.weight.data.to(dtype)
            elif isinstance(module, Linear) and module.bias is not None:
                module.bias.data = module.bias.data.to(dtype)
        self.tied_head_packed: torch.Tensor | None = None
        self.cos_sin_cache = torch.empty(0)  # set by build_model: [max_positions, head_dim], fp32

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv: KVContext) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # [num_tokens, hidden]
        residual = None
        for layer in self.layers:
            x, residual = layer(x, residual, positions, self.cos_sin_cache, kv)
        x, _ = self.norm(x, residual, kv.backend)
        return x

    @property
    def device(self) -> torch.device:
        return self.cos_sin_cache.device

    def weight_bytes(self) -> int:
        """Bytes of weights one forward reads (each projection once, the packed copy where there is one;
        the embedding table is only gathered from, so a tied head counts once as the head)."""
        total = 0
        for module in self.modules():
            if isinstance(module, (QuantLinear, QuantEmbedding)):  # the tied head reads the table once
                total += module.nbytes
            elif isinstance(module, Linear):
                t = module.packed if module.packed is not None else module.weight
                total += module.in_features * module.out_features * t.element_size()
            elif isinstance(module, RMSNorm):
                total += module.weight.numel() * module.weight.element_size()
        if self.lm_head is None and isinstance(self.embed_tokens, Embedding):
            total += self.embed_tokens.weight.numel() * self.embed_tokens.weight.element_size()
        return total

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.lm_head is not None:
            return self.lm_head(hidden).float()  # [num_rows, vocab]
        if isinstance(self.embed_tokens, QuantEmbedding):
            return self.embed_tokens.logits(hidden).float()
        return linear(hidden, self.embed_tokens.weight, None, self.tied_head_packed).float()

    @torch.no_grad()
    def init_random_weights(self, generator: torch.Generator | None = None) -> None:
        """Random weights for tests, scaled like torch's defaults (U(+-1/sqrt(fan_in)), embeddings N(0, 1))."""
        for name, param in self.named_parameters():
            if "norm" in name:
                param.fill_(1.0)
            elif name.startswith("embed_tokens"):
                param.normal_(0.0, 1.0, generator=generator)
            else:
                bound = param.shape[-1] ** -0.5 if param.dim() == 2 else 0.02
                param.uniform_(-bound, bound, generator=generator)

    def prepack(self) -> None:
        """Reorder every projection weight once for the CPU fast path (a no-op where it does not apply);
        a packed projection keeps no plain copy. The tied head packs a copy of the embedding table, which
        the lookup still needs."""
        for module in self.modules():
            if isinstance(module, Linear):
                module.prepack()
        if self.lm_head is None and isinstance(self.embed_tokens, Embedding):
            self.tied_head_packed = prepack_linear_weight(self.embed_tokens.weight)

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy Hugging Face-named tensors in, fusing q/k/v and gate/up as they arrive."""
        own = dict(self.named_parameters())
        seen: set[str] = set()

        def put(name: str, tensor: torch.Tensor, row_offset: int = 0) -> None:
            param = own[name]
            rows = tensor.shape[0]
            with torch.no_grad():
                param[row_offset : row_offset + rows].copy_(tensor)
            seen.add(name)

        cfg = self.config
        q_size = cfg.num_attention_heads * cfg.head_dim
        kv_size = cfg.num_key_value_heads * cfg.head_dim
        fused = {
            "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", q_size), "v_proj": ("qkv_proj", q_size + kv_size),
            "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", cfg.intermediate_size),
        }
        for hf_name, tensor in state.items():
            name = hf_name.removeprefix("model.")
            parts = name.split(".")
            if len(parts) >= 4 and parts[-2] in fused:
                target, offset = fused[parts[-2]]
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


def build_model(cfg: ModelConfig, state: Mapping[str, torch.Tensor] | None, dtype=torch.float32, device="cpu",
                weight_dtype: torch.dtype | None = None) -> Transformer:
    """A model on `device` with activations in `dtype` and weights in `weight_dtype` (default: `dtype`);
    random init when `state` is None (tests), else loaded from `state` (read one tensor at a time)."""
    with torch.device(device):
        model = Transformer(cfg, dtype, weight_dtype)  # uninitialized storage: the init would be overwritten
    if state is None:
        model.init_random_weights()
    else:
        model.load_hf_state_dict(state)
    cos_sin = ops.rope_cos_sin_cache(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta)
    model.cos_sin_cache = cos_sin.to(device)  # [max_positions, head_dim], fp32 whatever the model dtype
    model.eval().requires_grad_(False)
    model.prepack()  # after this, a packed projection holds no plain weight
    return model
