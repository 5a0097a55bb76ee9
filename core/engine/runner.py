"""ScheduledBatch -> tensors (positions, slot_mapping, block tables, context lengths) -> forward -> sampled tokens."""
from __future__ import annotations

import os

import torch

from .attention import AttentionMetadata, PagedKV
from ..model.decode_stack import MAX_ROWS, build_decode_stack
from .kv_cache import PagedKVCache
from ..model.model import Transformer
from .spec.verify import sample_spans
from .scheduler import ScheduledBatch
from ...kernels import ops


class ModelRunner:
    def __init__(self, model: Transformer, kv_cache: PagedKVCache, kernel_backend: str | None = None):
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = kv_cache.block_size
        self.device = model.device
        self.scale = model.config.attention_scale
        self.kernel_backend = ops.resolve_backend(kernel_backend, self.device)  # once, for every op
        self.cpu_kernels = model.cpu_kernels if self.device.type == "cpu" else None
        # a decode step's layers in one C++ call where the model allows (core/model/decode_stack.py; the same
        # bits as the Python forward); LLMCHAT_DECODE_STACK=off keeps the Python forward (to compare)
        use_stack = self.cpu_kernels is not None and self.kernel_backend == "torch" and (
            os.environ.get("LLMCHAT_DECODE_STACK", "").strip().lower() != "off")
        self.decode_stack = build_decode_stack(model) if use_stack else None

    def prepare(self, batch: ScheduledBatch) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[tuple[int, int]]]:
        """Inputs for one step, and per sequence the rows to sample: (first row, number of rows); 0 rows while
        still prefilling, 1 + the number of drafted tokens scheduled (each verified) once it reaches its end."""
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        seq_lens: list[int] = []
        cu_seqlens_q = [0]
        spans: list[tuple[int, int]] = []
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            start, end = seq.num_computed_tokens, seq.num_computed_tokens + n
            ids = seq.token_ids if end <= seq.num_tokens else seq.token_ids + seq.draft_ids
            input_ids.extend(ids[start:end])
            positions.extend(range(start, end))
            table = seq.block_table
            slot_mapping.extend(table[p // bs] * bs + p % bs for p in range(start, end))
            seq_lens.append(end)
            cu_seqlens_q.append(cu_seqlens_q[-1] + n)
            num_rows = max(0, end - seq.num_tokens + 1)
            spans.append((cu_seqlens_q[-1] - num_rows, num_rows))
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
            is_verify=any(n > 1 for _, n in spans),
        )
        return tensor(input_ids, torch.int64), tensor(positions, torch.int64), meta, spans

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> tuple[list[list[int]], dict[int, str]]:
        """Forward the batch; per sequence its new tokens: none while prefilling, one sampled token, or the
        drafted tokens the target kept plus one more (core/engine/spec/verify.py); and the sequences (by
        index in the batch) whose sampling failed, with the reason."""
        input_ids, positions, meta, spans = self.prepare(batch)
        if self.decode_stack is not None and meta.is_decode and len(input_ids) <= MAX_ROWS:
            hidden = self.decode_stack.forward(self.model.embed_tokens(input_ids), positions, meta.slot_mapping,
                                               meta.block_tables, meta.seq_lens, self.kv_cache.k, self.kv_cache.v)
        else:
            kv = PagedKV(self.kv_cache, meta, self.scale, self.kernel_backend, self.cpu_kernels)
            hidden = self.model(input_ids, positions, kv)
        rows = [first + j for first, n in spans for j in range(n)]
        if not rows:
            return [[] for _ in batch.seqs], {}
        logits = self.model.compute_logits(hidden[rows])  # [num_rows, vocab]
        packed, offset = [], 0
        for _, n in spans:  # the rows of each sequence, renumbered within logits
            packed.append((offset, n))
            offset += n
        return sample_spans(logits, packed, batch.seqs)
