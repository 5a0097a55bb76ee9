"""Helpers shared by the kernel tests: paged K/V with poisoned slots, a dense fp64 oracle, error bounds."""
from __future__ import annotations

from dataclasses import dataclass

import torch


def tolerance(dtype: torch.dtype) -> float:
    """Max |actual - expected| / max |expected| accepted between a kernel and its reference.
    fp32: rounding only. bf16 under the interpreter: its fp32->bf16 cast truncates (round toward zero)."""
    return {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]


def assert_rel_close(actual: torch.Tensor, expected: torch.Tensor, tol: float) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (actual.shape, expected.shape)
    assert not actual.isnan().any(), "NaN in the output: an unwritten element, or a read of a poisoned slot"
    err = (actual.double() - expected.double()).abs().max().item()
    scale = expected.double().abs().max().item()
    assert err <= tol * scale, f"max abs error {err:.3g} > {tol:g} * max |expected| ({scale:.3g})"


@dataclass(slots=True)
class PagedKV:
    """A paged cache holding sequences' K/V, plus the same K/V dense for the oracle."""

    k_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]; unused slots are NaN
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # int32 [num_seqs, max_blocks_per_seq]; padding points at an all-NaN block
    seq_lens: torch.Tensor  # int32 [num_seqs]
    keys: list[torch.Tensor]  # per sequence [seq_len, num_kv_heads, head_dim]
    values: list[torch.Tensor]


def make_paged_kv(
    seq_lens: list[int], num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype,
    device: torch.device, num_shared_blocks: int = 0, seed: int = 0,
) -> PagedKV:
    """Random K/V (never zeros) in shuffled, non-contiguous blocks; every table's first num_shared_blocks
    entries are the same physical blocks (a shared prefix); table padding and stale slots are NaN."""
    gen = torch.Generator().manual_seed(seed)
    own_blocks = [-(-n // block_size) - num_shared_blocks for n in seq_lens]
    assert all(n >= 0 for n in own_blocks), "every sequence must cover the shared prefix"
    num_blocks = num_shared_blocks + sum(own_blocks) + 2  # +1 never written (padding target), +1 spare
    physical = torch.randperm(num_blocks, generator=gen).tolist()
    poison_block, shared, rest = physical[0], physical[1 : 1 + num_shared_blocks], physical[1 + num_shared_blocks :]
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    max_blocks = max(-(-n // block_size) for n in seq_lens) + 1  # one padding entry past the longest
    block_tables = torch.full((len(seq_lens), max_blocks), poison_block, dtype=torch.int32)
    shared_len = num_shared_blocks * block_size
    shared_k = torch.randn(shared_len, num_kv_heads, head_dim, generator=gen).to(dtype)
    shared_v = torch.randn(shared_len, num_kv_heads, head_dim, generator=gen).to(dtype)
    keys, values = [], []
    for i, seq_len in enumerate(seq_lens):
        table = shared + [rest.pop() for _ in range(own_blocks[i])]
        block_tables[i, : len(table)] = torch.tensor(table, dtype=torch.int32)
        k = torch.cat([shared_k, torch.randn(seq_len - shared_len, num_kv_heads, head_dim, generator=gen).to(dtype)])
        v = torch.cat([shared_v, torch.randn(seq_len - shared_len, num_kv_heads, head_dim, generator=gen).to(dtype)])
        for pos in range(seq_len):
            k_cache[table[pos // block_size], pos % block_size] = k[pos]
            v_cache[table[pos // block_size], pos % block_size] = v[pos]
        keys.append(k.to(device))
        values.append(v.to(device))
    return PagedKV(k_cache.to(device), v_cache.to(device), block_tables.to(device),
                   torch.tensor(seq_lens, dtype=torch.int32, device=device), keys, values)


def sdpa_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Dense attention in fp64 for one sequence's new tokens q `[q_len, num_q_heads, head_dim]`, the last
    q_len of the context k, v `[seq_len, num_kv_heads, head_dim]`; causal. Returns fp64 `[q_len, heads, dim]`."""
    q_len, num_q_heads, _ = q.shape
    seq_len, num_kv_heads, _ = k.shape
    group = num_q_heads // num_kv_heads
    kd = k.double().repeat_interleave(group, dim=1).transpose(0, 1)  # [num_q_heads, seq_len, head_dim]
    vd = v.double().repeat_interleave(group, dim=1).transpose(0, 1)
    q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)  # [q_len]
    allowed = torch.arange(seq_len, device=q.device)[None, :] <= q_pos[:, None]  # [q_len, seq_len]
    qd = q.double().transpose(0, 1)  # [num_q_heads, q_len, head_dim]
    out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, attn_mask=allowed, scale=scale)
    return out.transpose(0, 1)  # [q_len, num_q_heads, head_dim]


def assert_same_rounding(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Bitwise equal, except bf16 on CPU: Triton's interpreter truncates fp32 -> bf16 where torch and GPUs
    round to nearest, so there one bf16 ulp (2^-7 relative, at most) is allowed."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if actual.dtype == torch.bfloat16 and actual.device.type == "cpu":
        diff = (actual.float() - expected.float()).abs()
        assert bool((diff <= expected.float().abs() * 2**-7).all()), diff.max()
    else:
        assert torch.equal(actual, expected)
