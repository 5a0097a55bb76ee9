"""ScheduledBatch -> tensors (positions, slot_mapping, block tables, context lengths) -> forward -> sampled tokens."""
from __future__ import annotations

import torch

from llmchat.core.attention import AttentionMetadata, PagedKV
from llmchat.core.kv_cache import PagedKVCache
from llmchat.core.model import Transformer
from llmchat.core.sampling import sample
from llmchat.core.scheduler import ScheduledBatch
from llmchat.kernels import ops


class ModelRunner:
    def __init__(self, model: Transformer, kv_cache: PagedKVCache, kernel_backend: str | None = None):
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = kv_cache.block_size
        self.device = model.device
        self.scale = model.config.head_dim**-0.5
        self.kernel_backend = ops.resolve_backend(kernel_backend, self.device)  # once, for every op

    def prepare(self, batch: ScheduledBatch) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[int]]:
        """Inputs for one step, and the index of each sampling sequence's last token (-1: still prefilling)."""
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        seq_lens: list[int] = []
        cu_seqlens_q = [0]
        sample_rows: list[int] = []
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            start, end = seq.num_computed_tokens, seq.num_computed_tokens + n
            input_ids.extend(seq.token_ids[start:end])
            positions.extend(range(start, end))
            table = seq.block_table
            slot_mapping.extend(table[p // bs] * bs + p % bs for p in range(start, end))
            seq_lens.append(end)
            cu_seqlens_q.append(cu_seqlens_q[-1] + n)
            sample_rows.append(cu_seqlens_q[-1] - 1 if end == seq.num_tokens else -1)
        max_blocks = max(len(seq.block_table) for seq in batch.seqs)
        block_tables = [seq.block_table + [0] * (max_blocks - len(seq.block_table)) for seq in batch.seqs]

        def tensor(values, dtype):
            return torch.tensor(values, dtype=dtype).to(self.device, non_blocking=True)

        meta = AttentionMetadata(
            slot_mapping=tensor(slot_mapping, torch.int64),
            block_tables=tensor(block_tables, torch.int32),
            seq_lens=tensor(seq_lens, torch.int32),
            cu_seqlens_q=tensor(cu_seqlens_q, torch.int32),
            is_decode=batch.is_decode,
        )
        return tensor(input_ids, torch.int64), tensor(positions, torch.int64), meta, sample_rows

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> list[int | None]:
        """Forward the batch; one sampled token per sequence that reached its end, None for those still prefilling."""
        input_ids, positions, meta, sample_rows = self.prepare(batch)
        kv = PagedKV(self.kv_cache, meta, self.scale, self.kernel_backend)
        hidden = self.model(input_ids, positions, kv)
        rows = [r for r in sample_rows if r >= 0]
        if not rows:
            return [None] * len(batch.seqs)
        logits = self.model.compute_logits(hidden[rows])  # [num_sampling, vocab]
        sampling = [seq for seq, r in zip(batch.seqs, sample_rows) if r >= 0]
        tokens = iter(sample(logits, [s.params for s in sampling], [s.generator for s in sampling]))
        return [next(tokens) if r >= 0 else None for r in sample_rows]
