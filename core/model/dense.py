"""The dense reference path: one sequence, a contiguous KV cache, no paging, no batching.

It is the slow, obvious generator that the paged engine is checked against token for token.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.nn import functional as F

from .model import Transformer
from ..api.params import SamplingParams
from .sampling import make_generator, sample
from ...kernels import ops


class DenseKV:
    """Contiguous K/V per layer for one sequence: `[max_len, num_kv_heads, head_dim]` (that layer's head size;
    None for a layer that reads another layer's K/V)."""

    def __init__(self, model: Transformer, max_len: int, backend: str | None = None) -> None:
        cfg = model.config
        dtype, device = model.dtype, model.device
        self.backend = ops.resolve_backend(backend, device)  # for the model's norms and RoPE
        self.cpu = model.cpu_kernels if device.type == "cpu" else None  # and their C++ kernels
        shapes = [(max_len, cfg.num_key_value_heads, cfg.head_dim_of(i)) if cfg.kv_source_of(i) == i else None
                  for i in range(cfg.num_hidden_layers)]
        self.k = [torch.zeros(s, dtype=dtype, device=device) if s else None for s in shapes]
        self.v = [torch.zeros(s, dtype=dtype, device=device) if s else None for s in shapes]
        self.scale = cfg.attention_scale
        self.start = 0  # tokens already in the cache before this forward

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None,
               window: int = 0, softcap: float = 0.0) -> torch.Tensor:
        num_new = q.shape[0]
        end = self.start + num_new
        if k is not None and v is not None:  # None: a KV-shared layer reads what layer_idx stored
            self.k[layer_idx][self.start : end] = k
            self.v[layer_idx][self.start : end] = v
        keys = self.k[layer_idx][:end].transpose(0, 1)  # [num_kv_heads, end, head_dim]
        values = self.v[layer_idx][:end].transpose(0, 1)
        query_pos = torch.arange(self.start, end, device=q.device)[:, None]
        key_pos = torch.arange(end, device=q.device)[None, :]
        mask = key_pos <= query_pos  # [num_new, end], causal
        if window > 0:
            mask &= key_pos > query_pos - window  # sliding window: the last `window` keys
        if softcap <= 0:
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1), keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True
            )  # [num_q_heads, num_new, head_dim]
            return out.transpose(0, 1)
        group = q.shape[1] // keys.shape[0]  # soft-capped scores (Gemma 2): spelled out, SDPA has no cap
        keys, values = keys.repeat_interleave(group, 0).float(), values.repeat_interleave(group, 0).float()
        scores = q.transpose(0, 1).float() @ keys.transpose(1, 2) * self.scale  # [num_q_heads, num_new, end]
        scores = (torch.tanh(scores / softcap) * softcap).masked_fill(~mask, float("-inf"))
        return (torch.softmax(scores, dim=-1) @ values).transpose(0, 1).to(q.dtype)


@torch.inference_mode()
def generate_dense(
    model: Transformer, prompt_ids: list[int], params: SamplingParams, stop_token_ids: frozenset[int] = frozenset()
) -> Iterator[int]:
    """Yield generated token ids one by one; stops after a stop token (which is yielded) or max_tokens."""
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    max_len = min(len(prompt_ids) + params.max_tokens, model.config.max_position_embeddings)
    if len(prompt_ids) >= max_len:
        raise ValueError(f"the prompt has {len(prompt_ids)} tokens; the model's context is {max_len}")
    device = model.device
    kv = DenseKV(model, max_len)
    generator = make_generator(params)
    input_ids = torch.tensor(prompt_ids, device=device)
    for _ in range(params.max_tokens):
        positions = torch.arange(kv.start, kv.start + len(input_ids), device=device)
        hidden = model(input_ids, positions, kv)
        kv.start += len(input_ids)
        logits = model.compute_logits(hidden[-1:])
        token = sample(logits, [params], [generator])[0]
        yield token
        if (token in stop_token_ids and not params.ignore_eos) or kv.start >= max_len:
            return
        input_ids = torch.tensor([token], device=device)
