"""The inner step both paged attention kernels share: one tile of keys read through the block table,
folded into the running (max, sum, acc) of an online softmax. A device function, called from kernels."""
from __future__ import annotations

from .triton_support import jit, tl


@jit
def _attend_paged_tile(
    q, m_i, l_i, acc,  # q [ROWS, DIM_PAD]; m_i, l_i [ROWS] fp32; acc [ROWS, DIM_PAD] fp32
    k_cache_ptr, v_cache_ptr, block_tables_ptr, seq, stride_bt_seq,
    n, n_mask, visible,  # key positions [BLOCK_N], which exist, which each row may see [ROWS or 1, BLOCK_N]
    kv_head, dims, dim_mask, stride_cache_block, stride_cache_slot, stride_cache_head, qk_scale, softcap,
    BLOCK_SIZE: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    SOFTCAP: tl.constexpr,  # scores -> softcap * tanh(scores / softcap); qk_scale is then the plain scale
):
    block_ids = tl.load(block_tables_ptr + seq * stride_bt_seq + n // BLOCK_SIZE, mask=n_mask, other=0)
    kv_offs = (block_ids.to(tl.int64)[:, None] * stride_cache_block + (n % BLOCK_SIZE)[:, None] * stride_cache_slot
               + kv_head * stride_cache_head + dims[None, :])
    kv_mask = n_mask[:, None] & dim_mask[None, :]
    k = tl.load(k_cache_ptr + kv_offs, mask=kv_mask, other=0.0)  # [BLOCK_N, DIM_PAD]
    v = tl.load(v_cache_ptr + kv_offs, mask=kv_mask, other=0.0)  # [BLOCK_N, DIM_PAD]
    p_dtype = v.dtype
    if UPCAST_DOT:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # [ROWS, BLOCK_N]
    if SOFTCAP:
        s = softcap * (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0) * 1.4426950408889634  # tanh; log2 domain
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that sees no key yet (sliding window) stays 0
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(p_dtype).to(v.dtype)  # rounded like the values it weighs (FlashAttention's convention)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    return m_new, l_i, acc
