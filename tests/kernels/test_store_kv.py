"""store_kv: the Triton kernel and the torch reference write exactly the slots asked for, nothing else."""
from __future__ import annotations

import pytest
import torch

from llmchat.kernels.store_kv import store_kv, store_kv_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _case(num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype, device: torch.device, seed: int):
    """Strided k/v (views into a fused qkv row, as the model makes them), a NaN cache, shuffled slots with skips."""
    gen = torch.Generator().manual_seed(seed)
    num_tokens, num_blocks = 13, 5
    q_size = 2 * num_kv_heads * head_dim
    qkv = torch.randn(num_tokens, q_size + 2 * num_kv_heads * head_dim, generator=gen).to(dtype).to(device)
    k, v = qkv[:, q_size:].view(num_tokens, 2 * num_kv_heads, head_dim).split(num_kv_heads, dim=1)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]  # distinct, scattered
    slots[[2, 7]] = -1  # padding tokens: not stored
    cache = torch.full((num_blocks, block_size, num_kv_heads, head_dim), float("nan"), dtype=dtype, device=device)
    return k, v, cache, slots.to(device)


def _expected(k, v, cache, slots):
    """The slow, obvious version: one token at a time."""
    k_exp, v_exp = cache.clone(), cache.clone()
    block_size = cache.shape[1]
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            k_exp[slot // block_size, slot % block_size] = k[t]
            v_exp[slot // block_size, slot % block_size] = v[t]
    return k_exp, v_exp


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality, NaN (an untouched slot) equal to NaN."""
    return bool((a.isnan() == b.isnan()).all()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("head_dim,block_size,num_kv_heads", [(64, 16, 3), (128, 32, 8), (64, 32, 1)])
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_store_kv_matches_per_token_loop(triton_device, dtype, head_dim, block_size, num_kv_heads, slot_dtype):
    k, v, cache, slots = _case(num_kv_heads, head_dim, block_size, dtype, triton_device, seed=head_dim + block_size)
    slots = slots.to(slot_dtype)
    k_exp, v_exp = _expected(k, v, cache, slots)
    for impl in (store_kv, store_kv_ref):
        k_cache, v_cache = cache.clone(), cache.clone()
        impl(k, v, k_cache, v_cache, slots)
        assert _same(k_cache, k_exp) and _same(v_cache, v_exp), impl.__name__
        assert k_cache.isnan().sum() == cache.isnan().sum() - 11 * num_kv_heads * head_dim  # 11 tokens stored


def test_store_kv_only_skips(triton_device):
    k, v, cache, slots = _case(2, 64, 16, torch.float32, triton_device, seed=1)
    k_cache, v_cache = cache.clone(), cache.clone()
    store_kv(k, v, k_cache, v_cache, torch.full_like(slots, -1))
    assert k_cache.isnan().all() and v_cache.isnan().all()
