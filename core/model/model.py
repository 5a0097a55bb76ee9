"""The decoder-only transformer: RMSNorm, RoPE, GQA attention, a gated MLP; one file for every architecture.

Llama, Mistral, Qwen2/3, Phi-3, Gemma 2/3/4 and SmolLM3 differ only in small named options of the config
(core/config.py): biases on q/k/v, an RMSNorm on each q and k (and v) head, which layers slide a window or skip
RoPE, how many dims RoPE turns, GeGLU instead of SwiGLU, norms around each block as well as before it, scaled
embeddings, soft-capped scores and logits; per layer (Gemma 4): its head size, whether it reads another layer's
K/V, per-layer embeddings (core/model/per_layer.py) and an output scalar.

Tokens are packed flat, `[num_tokens, hidden]`, with no batch dimension: a step may hold the new
tokens of many sequences. Attention goes through one object passed into forward (`KVContext`), so
the same model runs on a dense per-sequence cache (core/model/dense.py) or the paged cache (core/engine/attention.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from types import ModuleType
from typing import Protocol

import torch
from torch import nn
from torch.nn import functional as F

from ..config import NO_ROPE_ATTENTION, ModelConfig
from ...kernels import ops
from ...kernels.linear import linear, prepack_linear_weight
from .layers import Embedding, Linear
from .per_layer import add_per_layer_embeddings, add_per_layer_input_gate, apply_per_layer_input, per_layer_inputs
from .quant_layers import QuantEmbedding, QuantLinear
from .rope import rope_tables
from .state import load_state

ACTIVATIONS = {"silu": F.silu, "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh")}


class KVContext(Protocol):
    """Where a layer's K/V go and how its attention reads them back, and which kernels every op of this
    forward uses: the backend (resolved once by whoever builds the context: "torch" or "triton") and, on the
    CPU, the C++ kernels for the small ops (kernels/ops.py; None: the torch references)."""

    backend: str
    cpu: ModuleType | None

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None, window: int = 0,
               softcap: float = 0.0) -> torch.Tensor:
        """q `[num_tokens, num_q_heads, head_dim]`, k/v `[num_tokens, num_kv_heads, head_dim]` (RoPE applied);
        stores k/v as layer `layer_idx`'s, attends causally over the sequence's context (only its last `window`
        tokens when window > 0, scores soft-capped at `softcap` when > 0), returns `[num_tokens, num_q_heads,
        head_dim]`. k/v None: a KV-shared layer; it stores nothing and reads the K/V layer `layer_idx` stored."""
        ...


class RMSNorm(nn.Module):
    """weight * x / rms(x). Gemma's `(1 + w)` is folded into the weight when it is loaded (load_state)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, kv: KVContext):
        return ops.rms_norm(x, self.weight, self.eps, residual, backend=kv.backend, cpu=kv.cpu)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int, weight_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim_of(layer_idx)
        self.kv_source = cfg.kv_source_of(layer_idx)  # this layer, or the one whose K/V it reads (Gemma 4)
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim if self.kv_source == layer_idx else 0
        kind = cfg.layer_types[layer_idx]
        self.rope_table = None if kind == NO_ROPE_ATTENTION else kind  # which of the model's RoPE tables
        self.window = cfg.window_of(layer_idx)
        self.softcap = cfg.attn_logit_softcapping or 0.0
        self.eps, self.value_norm = cfg.rms_norm_eps, cfg.value_norm
        # q, k and v projections fused into one matmul (rows: q, then k, then v; a KV-shared layer has q only)
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, cfg.attention_bias, weight_dtype)
        self.o_proj = Linear(self.q_size, cfg.hidden_size, False, weight_dtype)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.qk_norm and self.kv_size else None

    def forward(self, x: torch.Tensor, positions: torch.Tensor, rope_tables: dict[str, torch.Tensor],
                kv: KVContext) -> torch.Tensor:
        num_tokens = x.shape[0]
        qkv = self.qkv_proj(x)  # [num_tokens, q_size + 2 * kv_size]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.kv_size // self.head_dim, self.head_dim)  # no heads where KV is shared
        v = v.view(num_tokens, self.kv_size // self.head_dim, self.head_dim)
        if self.q_norm is not None:
            q = self.q_norm(q, None, kv)
        if self.k_norm is not None:
            k = self.k_norm(k, None, kv)
        if self.value_norm:  # Gemma 4: v / rms(v), no weight
            v = F.rms_norm(v.float(), (self.head_dim,), eps=self.eps).to(v.dtype)
        if self.rope_table is not None:  # a table of rotary_dim columns: partial rotary turns only those dims
            q, k = ops.rope(q, k, positions, rope_tables[self.rope_table], backend=kv.backend, cpu=kv.cpu)
        stored = (k, v) if self.kv_size else (None, None)  # a KV-shared layer reads its source layer's K/V
        out = kv.attend(self.kv_source, q, *stored, self.window, self.softcap)  # [num_tokens, num_heads, head_dim]
        return self.o_proj(out.reshape(num_tokens, self.q_size))


class MLP(nn.Module):
    """down(act(gate(x)) * up(x)): SwiGLU with silu, GeGLU with tanh-approximated gelu (Gemma)."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, weight_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.intermediate_size = cfg.intermediate_size_of(layer_idx)
        if cfg.hidden_act not in ACTIVATIONS:
            raise ValueError(f"MLP activation {cfg.hidden_act!r} is not supported ({', '.join(ACTIVATIONS)})")
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.swiglu = cfg.hidden_act == "silu"
        self.gate_up_proj = Linear(cfg.hidden_size, 2 * self.intermediate_size, False, weight_dtype)  # gate, up
        self.down_proj = Linear(self.intermediate_size, cfg.hidden_size, False, weight_dtype)

    def forward(self, x: torch.Tensor, cpu: ModuleType | None = None) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.swiglu:
            return self.down_proj(ops.silu_and_mul(gate_up, cpu))
        gate, up = gate_up.split(self.intermediate_size, dim=-1)
        return self.down_proj(self.act(gate) * up)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)). With sandwich norms (Gemma 2/3) each
    block's output is normalized too before it joins the residual: post_attention_layernorm then names that
    norm, and pre_feedforward_layernorm the one before the MLP (Hugging Face's names in both cases). Gemma 4
    then adds the layer's per-layer input (core/model/per_layer.py) and scales the sum by `layer_scalar`."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, weight_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx, weight_dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, layer_idx, weight_dtype)
        self.sandwich = cfg.sandwich_norms
        if self.sandwich:
            self.pre_feedforward_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
            self.post_feedforward_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.per_layer_input = cfg.per_layer_input_size > 0
        if self.per_layer_input:
            self.act = self.mlp.act
            add_per_layer_input_gate(self, cfg, weight_dtype)
        self.layer_scalar = nn.Parameter(torch.ones(1)) if cfg.layer_scalar else None

    def forward(self, x, residual, positions, rope_tables, kv: KVContext, per_layer_input=None):
        """(block output, residual stream before it); the next norm adds the two (fused). With a per-layer
        input or scalar (Gemma 4): (the residual stream after the block, None)."""
        if residual is None:
            residual = x
            h = self.input_layernorm(x, None, kv)
        else:
            h, residual = self.input_layernorm(x, residual, kv)
        h = self.self_attn(h, positions, rope_tables, kv)
        if not self.sandwich:
            h, residual = self.post_attention_layernorm(h, residual, kv)
            return self.mlp(h, kv.cpu), residual
        h = self.post_attention_layernorm(h, None, kv)
        h, residual = self.pre_feedforward_layernorm(h, residual, kv)
        h = self.post_feedforward_layernorm(self.mlp(h, kv.cpu), None, kv)
        if not self.per_layer_input and self.layer_scalar is None:
            return h, residual
        x = residual + h
        if self.per_layer_input:
            x = apply_per_layer_input(self, x, per_layer_input, kv)
        return (x * self.layer_scalar if self.layer_scalar is not None else x), None


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
        if cfg.per_layer_input_size:
            add_per_layer_embeddings(self, cfg, weight_dtype, dtype)
        self.lm_head = None if cfg.tie_word_embeddings else Linear(cfg.hidden_size, cfg.vocab_size, False, weight_dtype)
        for module in self.modules():  # norms and biases live in the activation dtype
            if isinstance(module, RMSNorm):
                module.weight.data = module.weight.data.to(dtype)
            elif isinstance(module, Linear) and module.bias is not None:
                module.bias.data = module.bias.data.to(dtype)
            elif isinstance(module, DecoderLayer) and module.layer_scalar is not None:
                module.layer_scalar.data = module.layer_scalar.data.to(dtype)
        self.tied_head_packed: torch.Tensor | None = None
        self.rope_tables: dict[str, torch.Tensor] = {}  # set by build_model: per layer type, fp32 cos|sin
        self.cpu_kernels: ModuleType | None = None  # the C++ kernels of kernels/csrc/ (set by the loader on CPU)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv: KVContext) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # [num_tokens, hidden]
        if self.config.embedding_scale != 1.0:  # Gemma: rounded to the activation dtype, as Hugging Face does
            x = x * torch.tensor(self.config.embedding_scale, dtype=x.dtype)
        per_layer = per_layer_inputs(self, input_ids, x, kv) if self.config.per_layer_input_size else None
        residual = None
        for i, layer in enumerate(self.layers):
            layer_input = per_layer[:, i] if per_layer is not None else None
            x, residual = layer(x, residual, positions, self.rope_tables, kv, layer_input)
        return self.norm(x, None, kv) if residual is None else self.norm(x, residual, kv)[0]

    @property
    def device(self) -> torch.device:
        return self.norm.weight.device

    def weight_bytes(self) -> int:
        """Bytes of weights one forward reads (each projection once, the packed copy where there is one;
        the embedding table is only gathered from, so a tied head counts once as the head)."""
        total = 0
        for module in self.modules():
            if module is getattr(self, "embed_tokens_per_layer", None):  # Gemma 4's PLE table: only gathered from
                continue
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
            logits = self.lm_head(hidden).float()  # [num_rows, vocab]
        elif isinstance(self.embed_tokens, QuantEmbedding):
            logits = self.embed_tokens.logits(hidden).float()
        else:
            logits = linear(hidden, self.embed_tokens.weight, None, self.tied_head_packed).float()
        if cap := self.config.final_logit_softcapping:  # Gemma 2
            logits = torch.tanh(logits / cap) * cap
        return logits

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


def build_model(cfg: ModelConfig, state: Mapping[str, torch.Tensor] | None, dtype=torch.float32, device="cpu",
                weight_dtype: torch.dtype | None = None) -> Transformer:
    """A model on `device` with activations in `dtype` and weights in `weight_dtype` (default: `dtype`);
    random init when `state` is None (tests), else loaded from `state` (Hugging Face names and values,
    read one tensor at a time)."""
    with torch.device(device):
        model = Transformer(cfg, dtype, weight_dtype)  # uninitialized storage: the init would be overwritten
    if state is None:
        model.init_random_weights()
    else:
        load_state(model, state)
    model.rope_tables = {kind: table.to(device) for kind, table in rope_tables(cfg).items()}
    model.eval().requires_grad_(False)
    model.prepack()  # after this, a packed projection holds no plain weight
    return model
