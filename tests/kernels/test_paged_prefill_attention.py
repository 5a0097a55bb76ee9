"""paged_prefill_attention: Triton (tiled, online softmax) vs the torch reference; the reference vs dense SDPA."""
from __future__ import annotations

import pytest
import torch

from kernel_testing import assert_rel_close, make_paged_kv, sdpa_oracle, tolerance
from llmchat.kernels.paged_prefill_attention import paged_prefill_attention, paged_prefill_attention_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HEADS = {1: (2, 2), 3: (6, 2), 4: (4, 1), 8: (8, 1)}  # GQA ratio -> (num_q_heads, num_kv_heads)
SHAPES = [(64, 16), (128, 32), (64, 32), (128, 16)]  # (head_dim, block_size)
# Every GQA ratio with every shape, the dtype rotating: every pair of values meets at least once.
CASES = [(g, DTYPES[(i + j) % 3], *shape) for i, g in enumerate(HEADS) for j, shape in enumerate(SHAPES)]
CASE_IDS = [f"gqa{g}-{str(d)[6:]}-d{h}-bs{b}" for g, d, h, b in CASES]


def _batch(seq_lens: list[int], q_lens: list[int], num_q_heads: int, num_kv_heads: int, head_dim: int,
           block_size: int, dtype, device, num_shared_blocks: int = 0, seed: int = 0):
    """Paged K/V for whole contexts, and packed queries for each context's last q_len tokens."""
    kv = make_paged_kv(seq_lens, num_kv_heads, head_dim, block_size, dtype, device, num_shared_blocks, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(sum(q_lens), num_q_heads, head_dim, generator=gen).to(dtype).to(device)
    cu = torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
    return kv, q, cu


def _oracle(q, kv, cu, scale):
    bounds = cu.tolist()
    return torch.cat([sdpa_oracle(q[bounds[i] : bounds[i + 1]], kv.keys[i], kv.values[i], scale)
                      for i in range(len(kv.keys))])


def _run(q, kv, cu, scale, **tiling):
    out = torch.full_like(q, float("nan"))  # poisoned
    paged_prefill_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, cu, kv.seq_lens, scale, out=out, **tiling)
    return out


@pytest.mark.parametrize("group,dtype,head_dim,block_size", CASES, ids=CASE_IDS)
def test_prefill_kernel_matches_reference(triton_device, group, dtype, head_dim, block_size):
    """Ragged batch: a fresh prompt, a chunk after a cached prefix ending mid-block, a single token."""
    num_q_heads, num_kv_heads = HEADS[group]
    seq_lens, q_lens = [21, 2 * block_size + 5, 9], [21, 17, 1]
    kv, q, cu = _batch(seq_lens, q_lens, num_q_heads, num_kv_heads, head_dim, block_size, dtype, triton_device,
                       seed=group)
    scale = head_dim**-0.5
    out = _run(q, kv, cu, scale)
    ref = paged_prefill_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, cu, kv.seq_lens, scale)
    assert_rel_close(out, ref, tolerance(dtype))


@pytest.mark.parametrize("block_m,block_n", [(16, 16), (16, 64), (32, 16)])
def test_prefill_kernel_tiles_and_shared_blocks(triton_device, block_m, block_n):
    """Several query tiles per sequence, key tiles not aligned to blocks or to the tiles' diagonal,
    and sequences sharing their first two physical blocks (a prefix-cache hit)."""
    block_size = 16
    seq_lens, q_lens = [70, 40, 33], [45, 40, 2]
    kv, q, cu = _batch(seq_lens, q_lens, 6, 2, 64, block_size, torch.float32, triton_device, num_shared_blocks=2,
                       seed=7)
    out = _run(q, kv, cu, 0.125, block_m=block_m, block_n=block_n)
    ref = paged_prefill_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, cu, kv.seq_lens, 0.125)
    assert_rel_close(out, ref, 1e-5)
    assert_rel_close(out.double(), _oracle(q, kv, cu, 0.125), 1e-5)


def test_prefill_kernel_single_tokens_equal_decode(triton_device):
    """q_len = 1 everywhere is decode; the prefill kernel then agrees with the decode reference."""
    from llmchat.kernels.paged_decode_attention import paged_decode_attention_ref

    kv, q, cu = _batch([5, 31, 64], [1, 1, 1], 8, 2, 64, 32, torch.float32, triton_device, seed=8)
    out = _run(q, kv, cu, 0.125)
    ref = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, 0.125)
    assert_rel_close(out, ref, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("group", [1, 3, 4, 8])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("max_score_bytes", [1, 2 << 20], ids=["16-row-chunks", "one-chunk"])
def test_prefill_reference_matches_dense_sdpa(dtype, group, block_size, max_score_bytes):
    num_q_heads, num_kv_heads = HEADS[group]
    seq_lens, q_lens = [2 * block_size + 3, 19, 7, 3 * block_size], [2 * block_size + 3, 5, 1, 40]
    kv, q, cu = _batch(seq_lens, q_lens, num_q_heads, num_kv_heads, 64, block_size, dtype, torch.device("cpu"), seed=9)
    ref = paged_prefill_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, cu, kv.seq_lens, 0.125,
                                      max_score_bytes=max_score_bytes)
    tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}[dtype]
    assert_rel_close(ref.double(), _oracle(q, kv, cu, 0.125), tol)


def test_prefill_reference_with_shared_prefix_blocks():
    cpu = torch.device("cpu")
    kv, q, cu = _batch([50, 40], [10, 40], 4, 2, 64, 16, torch.float32, cpu, num_shared_blocks=2, seed=10)
    ref = paged_prefill_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, cu, kv.seq_lens, 0.125)
    assert_rel_close(ref.double(), _oracle(q, kv, cu, 0.125), 1e-5)
