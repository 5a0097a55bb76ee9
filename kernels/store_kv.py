"""store_kv: write the new tokens' K and V into the paged cache, one token per program.

A slot is `block_id * block_size + offset`; slot -1 means "skip this token" (padding).
"""
from __future__ import annotations

import torch

from .triton_support import check_launchable, jit, next_power_of_2, tl


@jit
def _store_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    stride_k_tok, stride_k_head, stride_v_tok, stride_v_head,
    stride_cache_block, stride_cache_slot, stride_cache_head,
    num_kv_heads, head_dim,
    BLOCK_SIZE: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    DIM_PAD: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:  # padding token: nothing to store
        return
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, DIM_PAD)
    mask = (heads[:, None] < num_kv_heads) & (dims[None, :] < head_dim)

    k = tl.load(k_ptr + token * stride_k_tok + heads[:, None] * stride_k_head + dims[None, :], mask=mask)
    v = tl.load(v_ptr + token * stride_v_tok + heads[:, None] * stride_v_head + dims[None, :], mask=mask)
    dst = block * stride_cache_block + offset * stride_cache_slot + heads[:, None] * stride_cache_head + dims[None, :]
    tl.store(k_cache_ptr + dst, k, mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)


def store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """k, v `[num_tokens, num_kv_heads, head_dim]` into k_cache, v_cache
    `[num_blocks, block_size, num_kv_heads, head_dim]` at `slot_mapping` `[num_tokens]` (-1: skip). In place."""
    check_launchable(k, v, k_cache, v_cache, slot_mapping)
    num_tokens, num_kv_heads, head_dim = k.shape
    assert v.shape == k.shape, (v.shape, k.shape)
    assert k_cache.shape == v_cache.shape and k_cache.stride() == v_cache.stride()
    assert k_cache.shape[2:] == (num_kv_heads, head_dim), (k_cache.shape, k.shape)
    assert k_cache.is_contiguous(), "the cache must be contiguous"
    assert k.dtype == v.dtype == k_cache.dtype == v_cache.dtype, "K/V and the cache must share one dtype"
    assert slot_mapping.shape == (num_tokens,) and slot_mapping.dtype in (torch.int32, torch.int64)
    assert k.stride(-1) == 1 and v.stride(-1) == 1, "head_dim must be the innermost, contiguous dimension"
    if num_tokens == 0:
        return
    block_size = k_cache.shape[1]
    _store_kv_kernel[(num_tokens,)](
        k, v, k_cache, v_cache, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        num_kv_heads, head_dim,
        BLOCK_SIZE=block_size,
        HEADS_PAD=next_power_of_2(num_kv_heads),
        DIM_PAD=next_power_of_2(head_dim),
    )


def store_kv_ref(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Plain torch: scatter the rows whose slot is not -1 into the flattened caches."""
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    keep = slot_mapping >= 0  # [num_tokens]
    slots = slot_mapping[keep].long()
    k_cache.view(num_blocks * block_size, num_kv_heads, head_dim)[slots] = k[keep].to(k_cache.dtype)
    v_cache.view(num_blocks * block_size, num_kv_heads, head_dim)[slots] = v[keep].to(v_cache.dtype)
