"""The Llama-family decoder (Llama, SmolLM, Qwen2): RMSNorm, RoPE, GQA attention, SwiGLU MLP.

Tokens are packed flat, `[num_tokens, hidden]`, with no batch dimension: a step may hold the new
tokens of many sequences. Attention goes through one object passed into forward (`KVContext`), so
the same model runs on a dense per-sequence cache (core/dense.py) or the paged cache (core/attention.py).
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import nn
from torch.nn import functional as F

from llmchat.core.config import ModelConfig
from llmchat.kernels import ops
from llmchat.kernels.linear import linear, prepack_linear_weight


class KVContext(Protocol):
    """Where a layer's K/V go and how its attention reads them back."""

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q `[num_tokens, num_q_heads, head_dim]`, k/v `[num_tokens, num_kv_heads, head_dim]` (RoPE applied);
        stores k/v, attends causally over the sequence's whole context, returns `[num_tokens, num_q_heads, head_dim]`."""
        ...


class Linear(nn.Module):
    """y = x W^T + b, whose weight can be prepacked once for the CPU fast path (kernels/linear.py).

    Weights start uninitialized (torch.empty): they are loaded, or set by init_random_weights in tests."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.packed: torch.Tensor | None = None

    def prepack(self) -> None:
        self.packed = prepack_linear_weight(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.packed)


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        return ops.rms_norm(x, self.weight, self.eps, residual)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        # q, k and v projections fused into one matmul (rows: q, then k, then v)
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.attention_bias)
        self.o_proj = Linear(self.q_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, kv: KVContext) -> torch.Tensor:
        num_tokens = x.shape[0]
        qkv = self.qkv_proj(x)  # [num_tokens, q_size + 2 * kv_size]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        q, k = ops.rope(q, k, positions, cos_sin)
        out = kv.attend(self.layer_idx, q, k, v)  # [num_tokens, num_heads, head_dim]
        return self.o_proj(out.reshape(num_tokens, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.intermediate_size = cfg.intermediate_size
        self.gate_up_proj = Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)  # gate rows, then up
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, residual, positions, cos_sin, kv: KVContext):
        if residual is None:
            residual = x
            h = self.input_layernorm(x)
        else:
            h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(h, positions, cos_sin, kv)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class Transformer(nn.Module):
    """forward(input_ids, positions, kv) -> final hidden states; compute_logits(hidden) -> logits."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.tied_head_packed: torch.Tensor | None = None
        self.cos_sin_cache = torch.empty(0)  # set by build_model: [max_positions, head_dim], fp32

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv: KVContext) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # [num_tokens, hidden]
        residual = None
        for layer in self.layers:
            x, residual = layer(x, residual, positions, self.cos_sin_cache, kv)
        x, _ = self.norm(x, residual)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.lm_head is not None:
            return self.lm_head(hidden).float()  # [num_rows, vocab]
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
        """Reorder every projection weight once for the CPU fast path (a no-op where it does not apply)."""
        for module in self.modules():
            if isinstance(module, Linear):
                module.prepack()
        if self.lm_head is None:
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


def build_model(cfg: ModelConfig, state: dict[str, torch.Tensor] | None, dtype=torch.float32, device="cpu") -> Transformer:
    """A model on `device` in `dtype`; random init when `state` is None (tests), else loaded from `state`."""
    with torch.device(device):
        model = Transformer(cfg).to(dtype)  # uninitialized storage: no time spent on an init that is overwritten
    if state is None:
        model.init_random_weights()
    else:
        model.load_hf_state_dict(state)
    cos_sin = ops.rope_cos_sin_cache(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta)
    model.cos_sin_cache = cos_sin.to(device)  # [max_positions, head_dim], fp32 whatever the model dtype
    model.eval().requires_grad_(False)
    model.prepack()
    return model
