"""paged_decode_attention: one new query token per sequence attends over its whole paged context.

Flash-decoding: the grid is (sequence, KV head, split). A program reads its split of the context once,
through the block table, for all the query heads that share its KV head (GQA), keeping an online
softmax (running max, running sum, unnormalized output) in fp32. A second kernel merges the splits
exactly: out = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i. With one split the first kernel
writes the output itself. Scores live in the log2 domain (scale * log2(e) folded in), so exp2 is used.
"""
from __future__ import annotations

import math

import torch

from .paged_attention_tile import _attend_paged_tile
from .triton_support import cdiv, check_launchable, jit, next_power_of_2, num_sms, tl, upcast_dot


@jit
def _paged_decode_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
    out_ptr, partial_out_ptr, partial_max_ptr, partial_sum_ptr,
    stride_q_seq, stride_q_head,
    stride_cache_block, stride_cache_slot, stride_cache_head,
    stride_bt_seq, stride_out_seq, stride_out_head,
    qk_scale, tokens_per_split, num_splits, num_q_heads, window, softcap,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    kv_start = split * tokens_per_split
    kv_end = tl.minimum(kv_start + tokens_per_split, seq_len)

    rows = tl.arange(0, GROUP_PAD)  # query heads of this KV head, padded for tl.dot
    dims = tl.arange(0, DIM_PAD)
    row_mask = rows < GROUP
    dim_mask = dims < HEAD_DIM
    q_heads = kv_head * GROUP + rows
    q_mask = row_mask[:, None] & dim_mask[None, :]
    q = tl.load(q_ptr + seq * stride_q_seq + q_heads[:, None] * stride_q_head + dims[None, :], mask=q_mask, other=0.0)
    if UPCAST_DOT:
        q = q.to(tl.float32)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM_PAD], tl.float32)
    loop_start = kv_start
    if window > 0:  # only the last `window` tokens are seen: skip the tiles before them
        loop_start = tl.maximum(kv_start, (seq_len - window) // BLOCK_N * BLOCK_N)
    for n_start in range(loop_start, kv_end, BLOCK_N):
        n = n_start + tl.arange(0, BLOCK_N)  # token positions in the context
        n_mask = n < kv_end
        visible = n_mask
        if window > 0:
            visible = visible & (n > seq_len - 1 - window)
        m_i, l_i, acc = _attend_paged_tile(
            q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq, stride_bt_seq, n, n_mask,
            visible[None, :], kv_head, dims, dim_mask, stride_cache_block, stride_cache_slot, stride_cache_head,
            qk_scale, softcap, BLOCK_SIZE, UPCAST_DOT, SOFTCAP,
        )

    if SINGLE_SPLIT:
        out = acc / l_i[:, None]
        out_offs = seq * stride_out_seq + q_heads[:, None] * stride_out_head + dims[None, :]
        tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=q_mask)
    else:  # partial results, [num_seqs, num_q_heads, num_splits(, HEAD_DIM)], fp32
        part = (seq * num_q_heads + q_heads) * num_splits + split  # [GROUP_PAD]
        tl.store(partial_max_ptr + part, m_i, mask=row_mask)
        tl.store(partial_sum_ptr + part, l_i, mask=row_mask)
        tl.store(partial_out_ptr + part[:, None] * HEAD_DIM + dims[None, :], acc, mask=q_mask)


@jit
def _paged_decode_reduce_kernel(
    partial_out_ptr, partial_max_ptr, partial_sum_ptr, out_ptr,
    stride_out_seq, stride_out_head, num_splits, num_q_heads,
    HEAD_DIM: tl.constexpr,
    DIM_PAD: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    q_head = tl.program_id(1)
    splits = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, DIM_PAD)
    split_mask = splits < num_splits
    part = (seq * num_q_heads + q_head) * num_splits + splits  # [SPLITS_PAD]
    m = tl.load(partial_max_ptr + part, mask=split_mask, other=float("-inf"))
    l = tl.load(partial_sum_ptr + part, mask=split_mask, other=0.0)
    mask = split_mask[:, None] & (dims[None, :] < HEAD_DIM)
    acc = tl.load(partial_out_ptr + part[:, None] * HEAD_DIM + dims[None, :], mask=mask, other=0.0)
    weight = tl.exp2(m - tl.max(m, 0))  # empty splits (m = -inf) weigh 0
    out = tl.sum(acc * weight[:, None], 0) / tl.sum(l * weight, 0)  # [DIM_PAD]
    tl.store(out_ptr + seq * stride_out_seq + q_head * stride_out_head + dims, out.to(out_ptr.dtype.element_ty),
             mask=dims < HEAD_DIM)


def _pick_num_splits(num_seqs: int, num_kv_heads: int, max_blocks: int, block_size: int, device: torch.device) -> int:
    """Enough splits to give every SM a few programs, never a split shorter than 256 tokens."""
    wanted = cdiv(4 * num_sms(device), max(1, num_seqs * num_kv_heads))
    return max(1, min(wanted, cdiv(max_blocks * block_size, 256)))


def paged_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    seq_lens: torch.Tensor, scale: float, num_splits: int | None = None, block_n: int | None = None,
    out: torch.Tensor | None = None, window: int = 0, softcap: float = 0.0,
) -> torch.Tensor:
    """q `[num_seqs, num_q_heads, head_dim]`; caches `[num_blocks, block_size, num_kv_heads, head_dim]`;
    block_tables int32 `[num_seqs, max_blocks_per_seq]`; seq_lens int32 `[num_seqs]` (>= 1, the current
    token included). Returns out like q (contiguous; written into `out` when given). num_splits / block_n
    override the tuning (tests). window > 0: only the last `window` tokens are seen; softcap > 0: scores
    become softcap * tanh(scores / softcap)."""
    check_launchable(q, k_cache, v_cache, block_tables, seq_lens)
    num_seqs, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    assert k_cache.shape == v_cache.shape and k_cache.stride() == v_cache.stride()
    assert k_cache.shape[3] == head_dim and num_q_heads % num_kv_heads == 0, (q.shape, k_cache.shape)
    assert q.dtype == k_cache.dtype == v_cache.dtype, (q.dtype, k_cache.dtype)
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1
    assert block_tables.dim() == 2 and block_tables.shape[0] == num_seqs and block_tables.stride(1) == 1
    assert block_tables.dtype == seq_lens.dtype == torch.int32, "block_tables and seq_lens must be int32"
    assert seq_lens.shape == (num_seqs,), (seq_lens.shape, num_seqs)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # [num_seqs, num_q_heads, head_dim]
    assert out.shape == q.shape and out.dtype == q.dtype and out.stride(-1) == 1
    if num_seqs == 0:
        return out
    group = num_q_heads // num_kv_heads
    block_n = block_n or (64 if q.is_cuda else 32)
    max_blocks = block_tables.shape[1]
    if num_splits is None:
        num_splits = _pick_num_splits(num_seqs, num_kv_heads, max_blocks, block_size, q.device)
    max_context = max_blocks * block_size  # an upper bound known without a device sync
    tokens_per_split = cdiv(cdiv(max_context, num_splits), block_n) * block_n
    num_splits = max(1, cdiv(max_context, tokens_per_split))  # drop splits that would be empty
    single = num_splits == 1
    part_shape = (num_seqs, num_q_heads, num_splits) if not single else (1,)
    partial_max = torch.empty(part_shape, dtype=torch.float32, device=q.device)
    partial_sum = torch.empty(part_shape, dtype=torch.float32, device=q.device)
    partial_out = torch.empty((*part_shape, head_dim), dtype=torch.float32, device=q.device)
    dim_pad = max(16, next_power_of_2(head_dim))
    _paged_decode_attention_kernel[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens,
        out, partial_out, partial_max, partial_sum,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        scale if softcap > 0 else scale * math.log2(math.e), tokens_per_split, num_splits, num_q_heads, window,
        softcap,
        GROUP=group,
        GROUP_PAD=max(16, next_power_of_2(group)),
        HEAD_DIM=head_dim,
        DIM_PAD=dim_pad,
        BLOCK_SIZE=block_size,
        BLOCK_N=block_n,
        SINGLE_SPLIT=single,
        UPCAST_DOT=upcast_dot(q.dtype),
        SOFTCAP=softcap > 0,
    )
    if not single:
        _paged_decode_reduce_kernel[(num_seqs, num_q_heads)](
            partial_out, partial_max, partial_sum, out,
            out.stride(0), out.stride(1), num_splits, num_q_heads,
            HEAD_DIM=head_dim,
            DIM_PAD=dim_pad,
            SPLITS_PAD=next_power_of_2(num_splits),
        )
    return out


def paged_decode_attention_ref(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    seq_lens: torch.Tensor, scale: float, window: int = 0, softcap: float = 0.0,
) -> torch.Tensor:
    """Plain torch, batched: gather every sequence's K/V through its block table at once (whole blocks as
    rows of a 2-D view: a 4-D index_select plus a transposing copy ran 4-6x slower at 500-2000 tokens on
    CPU), zero the stale tail, then per KV head softmax(q k^T * scale) v in fp32 with the head's query
    group as rows (GQA), reading K/V through strided views without copies."""
    num_seqs, num_q_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    if num_seqs == 0:
        return torch.empty_like(q)
    num_blocks_used = cdiv(int(seq_lens.max()), block_size)
    blocks = block_tables[:, :num_blocks_used].long().clamp(min=0).flatten()  # padding entries ignored below
    max_len = num_blocks_used * block_size

    def gather(cache: torch.Tensor) -> torch.Tensor:
        rows = cache.view(num_blocks, -1).index_select(0, blocks)  # [num_seqs * num_blocks_used, block elems]
        return rows.view(num_seqs, max_len, num_kv_heads, head_dim).float()

    k, v = gather(k_cache), gather(v_cache)  # each [num_seqs, max_len, num_kv_heads, head_dim]
    for i, seq_len in enumerate(seq_lens.tolist()):  # stale slots may hold anything, NaN included (0 * NaN = NaN),
        v[i, seq_len:] = 0.0  # and only each sequence's tail is stale
    pos = torch.arange(max_len, device=q.device)[None, :]
    hidden = pos >= seq_lens[:, None]  # [num_seqs, max_len]
    if window > 0:
        hidden |= pos < seq_lens[:, None] - window  # sliding window: the last `window` tokens only
    qg = q.float().view(num_seqs, num_kv_heads, group, head_dim)
    out = torch.empty(num_seqs, num_kv_heads, group, head_dim, dtype=torch.float32, device=q.device)
    for h in range(num_kv_heads):
        scores = torch.bmm(qg[:, h], k[:, :, h].transpose(1, 2)).mul_(scale)  # [num_seqs, group, max_len]
        if softcap > 0:
            scores = torch.tanh(scores / softcap) * softcap
        scores.masked_fill_(hidden[:, None, :], float("-inf"))
        out[:, h] = torch.bmm(torch.softmax(scores, dim=-1), v[:, :, h])  # [num_seqs, group, head_dim]
    return out.view(num_seqs, num_q_heads, head_dim).to(q.dtype)
