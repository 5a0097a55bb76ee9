"""paged_prefill_attention: the new tokens of many sequences, packed, attend causally over their paged context.

Sequence i's new tokens are q[cu_seqlens_q[i]:cu_seqlens_q[i+1]], the LAST q_len positions of its
seq_len-token context; the K/V of all seq_len tokens (cached prefix and new tokens alike) are already in
the cache. The grid is (sequence, query head, tile of BLOCK_M new tokens); a program walks the keys its
tile may see, BLOCK_N at a time, looking every key's slot up in the block table, with an online softmax
(FlashAttention) in fp32 and scores in the log2 domain.
"""
from __future__ import annotations

import math

import torch

from .paged_attention_tile import _attend_paged_tile
from .triton_support import cdiv, check_launchable, jit, next_power_of_2, tl, upcast_dot


@jit
def _paged_prefill_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, cu_seqlens_q_ptr, seq_lens_ptr, out_ptr,
    stride_q_tok, stride_q_head,
    stride_cache_block, stride_cache_slot, stride_cache_head,
    stride_bt_seq, stride_out_tok, stride_out_head,
    qk_scale, window, softcap,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    q_head = tl.program_id(1)
    tile = tl.program_id(2)
    q_start = tl.load(cu_seqlens_q_ptr + seq).to(tl.int64)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1).to(tl.int64) - q_start
    if tile * BLOCK_M >= q_len:  # this sequence has fewer new tokens than the longest one
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    first_pos = seq_len - q_len  # context position of the first new token
    kv_head = q_head // GROUP

    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # new-token indices within the sequence
    dims = tl.arange(0, DIM_PAD)
    row_mask = rows < q_len
    dim_mask = dims < HEAD_DIM
    q_mask = row_mask[:, None] & dim_mask[None, :]
    q_offs = (q_start + rows)[:, None] * stride_q_tok + q_head * stride_q_head + dims[None, :]
    q = tl.load(q_ptr + q_offs, mask=q_mask, other=0.0)  # [BLOCK_M, DIM_PAD]
    if UPCAST_DOT:
        q = q.to(tl.float32)
    q_pos = first_pos + rows  # [BLOCK_M]

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DIM_PAD], tl.float32)
    kv_end = tl.minimum(seq_len, first_pos + (tile + 1) * BLOCK_M)  # keys past the tile's last row are unseen
    # keys before the tile's first row's window are unseen by every row (one expression, not a reassignment in
    # an `if`: compiled Triton requires both branches to give one type, and here they did not: int32 vs int64)
    kv_start = tl.where(window > 0, tl.maximum(first_pos + tile * BLOCK_M - window + 1, 0) // BLOCK_N * BLOCK_N, 0)
    for n_start in range(kv_start, kv_end, BLOCK_N):
        n = n_start + tl.arange(0, BLOCK_N)  # key positions
        n_mask = n < kv_end
        visible = (n[None, :] <= q_pos[:, None]) & n_mask[None, :]  # causal
        if window > 0:
            visible = visible & (n[None, :] > q_pos[:, None] - window)  # sliding window: the last `window` keys
        m_i, l_i, acc = _attend_paged_tile(
            q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq, stride_bt_seq, n, n_mask, visible,
            kv_head, dims, dim_mask, stride_cache_block, stride_cache_slot, stride_cache_head, qk_scale, softcap,
            BLOCK_SIZE, UPCAST_DOT, SOFTCAP,
        )

    out = acc / l_i[:, None]
    out_offs = (q_start + rows)[:, None] * stride_out_tok + q_head * stride_out_head + dims[None, :]
    tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=q_mask)


def paged_prefill_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor, scale: float,
    max_q_len: int | None = None, block_m: int | None = None, block_n: int | None = None,
    out: torch.Tensor | None = None, window: int = 0, softcap: float = 0.0,
) -> torch.Tensor:
    """q `[num_new_tokens, num_q_heads, head_dim]` packed over sequences; caches
    `[num_blocks, block_size, num_kv_heads, head_dim]`; block_tables int32 `[num_seqs, max_blocks_per_seq]`;
    cu_seqlens_q int32 `[num_seqs + 1]`; seq_lens int32 `[num_seqs]` (context length, new tokens included).
    Returns out like q (contiguous; written into `out` when given). max_q_len saves a device sync;
    block_m / block_n override the tiling. window > 0: each query sees only the last `window` keys (its own
    included); softcap > 0: scores become softcap * tanh(scores / softcap)."""
    check_launchable(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens)
    num_tokens, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    num_seqs = seq_lens.shape[0]
    assert k_cache.shape == v_cache.shape and k_cache.stride() == v_cache.stride()
    assert k_cache.shape[3] == head_dim and num_q_heads % num_kv_heads == 0, (q.shape, k_cache.shape)
    assert q.dtype == k_cache.dtype == v_cache.dtype, (q.dtype, k_cache.dtype)
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1
    assert block_tables.dim() == 2 and block_tables.shape[0] == num_seqs and block_tables.stride(1) == 1
    assert block_tables.dtype == cu_seqlens_q.dtype == seq_lens.dtype == torch.int32
    assert cu_seqlens_q.shape == (num_seqs + 1,)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # [num_new_tokens, num_q_heads, head_dim]
    assert out.shape == q.shape and out.dtype == q.dtype and out.stride(-1) == 1
    if num_tokens == 0 or num_seqs == 0:
        return out
    if max_q_len is None:
        max_q_len = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
    block_m = block_m or (64 if q.is_cuda else 32)
    block_n = block_n or (64 if q.is_cuda else 32)
    _paged_prefill_attention_kernel[(num_seqs, num_q_heads, cdiv(max_q_len, block_m))](
        q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, out,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        scale if softcap > 0 else scale * math.log2(math.e), window, softcap,
        GROUP=num_q_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        DIM_PAD=max(16, next_power_of_2(head_dim)),
        BLOCK_SIZE=block_size,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        UPCAST_DOT=upcast_dot(q.dtype),
        SOFTCAP=softcap > 0,
    )
    return out


def paged_prefill_attention_ref(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor, scale: float, max_score_bytes: int = 2 << 20,
    window: int = 0, softcap: float = 0.0,
) -> torch.Tensor:
    """Plain torch, one sequence at a time: gather its seq_len keys/values through the block table, then
    softmax(q k^T * scale + causal mask) v in fp32, all heads in one batched matmul (GQA: each KV head's
    query heads stacked as rows). Queries go in chunks (>= 16 rows) whose fp32 scores stay under
    max_score_bytes, each against only the keys it can see: long prompts need bounded memory and half the
    work, and the scores stay in cache (on 2 CPU threads, 2 MB chunks ran a 2048-token prompt ~4x faster
    than one 2048 x 2048 score matrix, on par with SDPA's fused CPU kernel)."""
    num_tokens, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # [num_new_tokens, num_q_heads, head_dim]
    starts = cu_seqlens_q.tolist()
    for i, seq_len in enumerate(seq_lens.tolist()):
        q_len = starts[i + 1] - starts[i]
        if q_len == 0:
            continue
        blocks = block_tables[i, : cdiv(seq_len, block_size)].long()  # [num_blocks_used]

        def gather(cache: torch.Tensor) -> torch.Tensor:
            rows = cache.view(cache.shape[0], -1).index_select(0, blocks)  # whole blocks as rows: a fast 2-D gather
            x = rows.view(-1, num_kv_heads, head_dim)[:seq_len]  # [seq_len, kv_heads, dim]
            return x.transpose(0, 1).contiguous().float()  # [kv_heads, seq_len, head_dim]

        k, v = gather(k_cache), gather(v_cache)
        chunk = max(16, max_score_bytes // (4 * num_q_heads * seq_len))
        for c_start in range(0, q_len, chunk):
            c_len = min(chunk, q_len - c_start)
            first = starts[i] + c_start  # row of the chunk's first query in q
            q_pos = torch.arange(seq_len - q_len + c_start, seq_len - q_len + c_start + c_len, device=q.device)
            num_keys = int(q_pos[-1]) + 1  # the chunk's last query sees keys 0 .. its own position
            qc = q[first : first + c_len].float().reshape(c_len, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
            qc = qc.reshape(num_kv_heads, group * c_len, head_dim) * scale  # [kv_heads, group * c_len, head_dim]
            lo = max(0, int(q_pos[0]) - window + 1) if window > 0 else 0  # keys before lo: outside every window
            scores = qc @ k[:, lo:num_keys].transpose(1, 2)  # [kv_heads, group * c_len, num_keys - lo], scaled
            scores = scores.view(num_kv_heads, group, c_len, num_keys - lo)
            if softcap > 0:
                scores = torch.tanh(scores / softcap) * softcap
            keys = torch.arange(lo, num_keys, device=q.device)
            hidden = keys[None, :] > q_pos[:, None]  # causal
            if window > 0:
                hidden |= keys[None, :] <= q_pos[:, None] - window  # sliding window
            scores.masked_fill_(hidden, float("-inf"))
            probs = torch.softmax(scores, dim=-1).view(num_kv_heads, group * c_len, num_keys - lo)
            oc = (probs @ v[:, lo:num_keys]).view(num_kv_heads, group, c_len, head_dim)  # [kv_heads, group, c_len, dim]
            out[first : first + c_len] = oc.permute(2, 0, 1, 3).reshape(c_len, num_q_heads, head_dim).to(q.dtype)
    return out
