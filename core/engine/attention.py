"""Attention over the paged cache: the metadata of one step and the KVContext the model calls."""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

from .kv_cache import PagedKVCache
from ...kernels import ops


@dataclass(slots=True)
class AttentionMetadata:
    """Tensors describing one step's packed tokens (built by the runner, passed explicitly into forward)."""

    slot_mapping: torch.Tensor  # [num_tokens] int64: block_id * block_size + offset
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32
    seq_lens: torch.Tensor  # [num_seqs] int32: context length after this step
    cu_seqlens_q: torch.Tensor  # [num_seqs + 1] int32: offsets of each sequence's new tokens
    is_decode: bool  # every sequence has exactly one new token


class PagedKV:
    """KVContext over the paged cache: store the new K/V through slot_mapping, then attend via block tables."""

    def __init__(self, cache: PagedKVCache, meta: AttentionMetadata, scale: float, backend: str,
                 cpu: ModuleType | None = None):
        self.cache = cache
        self.meta = meta
        self.scale = scale
        self.backend = backend  # resolved ("torch" or "triton"): the model's norms and RoPE use it too
        self.cpu = cpu  # the C++ CPU kernels (None: the torch references), for the small ops too

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None,
               window: int = 0, softcap: float = 0.0) -> torch.Tensor:
        m = self.meta
        k_cache, v_cache = self.cache.k[layer_idx], self.cache.v[layer_idx]
        if k is not None and v is not None:  # None: a KV-shared layer reads what layer_idx stored this step
            ops.store_kv(k, v, k_cache, v_cache, m.slot_mapping, backend=self.backend, cpu=self.cpu)
        if m.is_decode:
            return ops.paged_decode_attention(
                q, k_cache, v_cache, m.block_tables, m.seq_lens, self.scale, backend=self.backend, window=window,
                softcap=softcap, cpu=self.cpu,
            )
        return ops.paged_prefill_attention(
            q, k_cache, v_cache, m.block_tables, m.cu_seqlens_q, m.seq_lens, self.scale, backend=self.backend,
            window=window, softcap=softcap,
        )
