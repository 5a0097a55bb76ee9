"""Attention over the paged cache: the metadata of one step and the KVContext the model calls."""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

from .kv_cache import PagedKVCache
from ...kernels import ops

# A speculative verify step (drafted tokens scheduled) of at most this many new tokens, on the C++ CPU kernels,
# attends token by token with the decode kernel (each token a query over its own context): its rows then get the
# bits decode steps would give them, so speculation keeps greedy replies identical. Prompt chunks keep the
# batched prefill attention whatever their size, so a prompt's K/V is the same whole or as a tail after a cache
# hit (and the per-token kernel would not reuse K/V rows across a long prompt's queries).
PER_TOKEN_MAX_TOKENS = 64


@dataclass(slots=True)
class AttentionMetadata:
    """Tensors describing one step's packed tokens (built by the runner, passed explicitly into forward)."""

    slot_mapping: torch.Tensor  # [num_tokens] int64: block_id * block_size + offset
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32
    seq_lens: torch.Tensor  # [num_seqs] int32: context length after this step
    cu_seqlens_q: torch.Tensor  # [num_seqs + 1] int32: offsets of each sequence's new tokens
    is_decode: bool  # every sequence has exactly one new token
    is_verify: bool = False  # some sequence's drafted tokens are scheduled (speculative decoding)


class PagedKV:
    """KVContext over the paged cache: store the new K/V through slot_mapping, then attend via block tables."""

    def __init__(self, cache: PagedKVCache, meta: AttentionMetadata, scale: float, backend: str,
                 cpu: ModuleType | None = None):
        self.cache = cache
        self.meta = meta
        self.scale = scale
        self.backend = backend  # resolved ("torch" or "triton"): the model's norms and RoPE use it too
        self.cpu = cpu  # the C++ CPU kernels (None: the torch references), for the small ops too
        self._per_token: tuple[torch.Tensor, torch.Tensor] | None = None

    def per_token(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each new token as a sequence of its own: (block tables `[num_tokens, max_blocks]` int32, context
        lengths `[num_tokens]` int32, its own position included); computed once per step."""
        if self._per_token is None:
            m = self.meta
            q_lens = (m.cu_seqlens_q[1:] - m.cu_seqlens_q[:-1]).long()
            seq_of = torch.repeat_interleave(torch.arange(len(q_lens), device=q_lens.device), q_lens)
            tokens = torch.arange(len(seq_of), device=q_lens.device)
            lens = m.seq_lens[seq_of] - (m.cu_seqlens_q[1:][seq_of] - tokens) + 1
            self._per_token = (m.block_tables[seq_of].contiguous(), lens.to(torch.int32).contiguous())
        return self._per_token

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
        if m.is_verify and self.cpu is not None and self.backend == "torch" and q.shape[0] <= PER_TOKEN_MAX_TOKENS:
            tables, lens = self.per_token()
            return ops.paged_decode_attention(q, k_cache, v_cache, tables, lens, self.scale, backend=self.backend,
                                              window=window, softcap=softcap, cpu=self.cpu)
        return ops.paged_prefill_attention(
            q, k_cache, v_cache, m.block_tables, m.cu_seqlens_q, m.seq_lens, self.scale, backend=self.backend,
            window=window, softcap=softcap,
        )
