"""paged_decode_attention: Triton (flash-decoding) vs the torch reference; the reference vs dense SDPA."""
from __future__ import annotations

import pytest
import torch

from kernel_testing import assert_rel_close, make_paged_kv, sdpa_oracle, tolerance
from llmchat.kernels.paged_decode_attention import paged_decode_attention, paged_decode_attention_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HEADS = {1: (2, 2), 3: (9, 3), 4: (8, 2), 8: (8, 1)}  # GQA ratio -> (num_q_heads, num_kv_heads)
SHAPES = [(64, 16), (128, 32), (64, 32), (128, 16)]  # (head_dim, block_size)
# Every GQA ratio with every shape, the dtype rotating: these 16 cases hold every pair of (ratio, shape,
# dtype) values at least once; the full product (48) is too slow for Triton's interpreter.
CASES = [(g, DTYPES[(i + j) % 3], *shape) for i, g in enumerate(HEADS) for j, shape in enumerate(SHAPES)]
CASE_IDS = [f"gqa{g}-{str(d)[6:]}-d{h}-bs{b}" for g, d, h, b in CASES]


def _seq_lens(block_size: int) -> list[int]:
    """Ragged: a lone token, one short of a block, exactly two blocks, and a long one ending mid-block."""
    return [1, block_size - 1, 2 * block_size, 5 * block_size + 3]


def _q(num_seqs: int, num_q_heads: int, head_dim: int, dtype, device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(num_seqs, num_q_heads, head_dim, generator=gen).to(dtype).to(device)


def _oracle(q: torch.Tensor, kv, scale: float) -> torch.Tensor:
    return torch.stack([sdpa_oracle(q[i : i + 1], kv.keys[i], kv.values[i], scale)[0] for i in range(q.shape[0])])


@pytest.mark.parametrize("group,dtype,head_dim,block_size", CASES, ids=CASE_IDS)
def test_decode_kernel_matches_reference(triton_device, dtype, group, head_dim, block_size):
    num_q_heads, num_kv_heads = HEADS[group]
    seq_lens = _seq_lens(block_size)
    kv = make_paged_kv(seq_lens, num_kv_heads, head_dim, block_size, dtype, triton_device, seed=group)
    q = _q(len(seq_lens), num_q_heads, head_dim, dtype, triton_device)
    scale = head_dim**-0.5
    out = torch.full_like(q, float("nan"))  # poisoned
    paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, scale, num_splits=2, out=out)
    ref = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, scale)
    assert_rel_close(out, ref, tolerance(dtype))


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7])
@pytest.mark.parametrize("block_n", [16, 32])
def test_decode_kernel_splits_and_shared_blocks(triton_device, num_splits, block_n):
    """Any number of context splits (some of them empty for short sequences) merges to the same result;
    sequences sharing their first blocks (a cached prefix) read them correctly."""
    block_size, head_dim = 16, 64
    seq_lens = [33, 100, 16 * 7, 49]
    kv = make_paged_kv(seq_lens, 2, head_dim, block_size, torch.float32, triton_device, num_shared_blocks=2, seed=3)
    q = _q(len(seq_lens), 6, head_dim, torch.float32, triton_device, seed=1)
    out = torch.full_like(q, float("nan"))
    paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, 0.125,
                           num_splits=num_splits, block_n=block_n, out=out)
    ref = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, 0.125)
    assert_rel_close(out, ref, 1e-5)
    assert_rel_close(out.double(), _oracle(q, kv, 0.125), 1e-5)


@pytest.mark.parametrize("block_size", [8, 16])
def test_decode_kernel_default_tuning(triton_device, block_size):
    """The wrapper's own split choice (no overrides), on a batch with a long table; pages smaller than a tile."""
    kv = make_paged_kv([300, 5, 77], 3, 64, block_size, torch.float32, triton_device, seed=4)
    q = _q(3, 9, 64, torch.float32, triton_device, seed=2)
    out = paged_decode_attention(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, 0.125)
    ref = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, 0.125)
    assert_rel_close(out, ref, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("group", [1, 3, 4, 8])
@pytest.mark.parametrize("block_size", [16, 32])
def test_decode_reference_matches_dense_sdpa(dtype, group, block_size):
    num_q_heads, num_kv_heads = HEADS[group]
    seq_lens = _seq_lens(block_size) + [3 * block_size + 1]
    cpu = torch.device("cpu")
    kv = make_paged_kv(seq_lens, num_kv_heads, 64, block_size, dtype, cpu, num_shared_blocks=0, seed=5)
    q = _q(len(seq_lens), num_q_heads, 64, dtype, cpu, seed=3)
    ref = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, 0.125)
    tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}[dtype]
    assert_rel_close(ref.double(), _oracle(q, kv, 0.125), tol)


def test_decode_reference_with_shared_prefix_blocks():
    cpu = torch.device("cpu")
    kv = make_paged_kv([40, 64, 35], 2, 64, 16, torch.float32, cpu, num_shared_blocks=2, seed=6)
    assert torch.equal(kv.block_tables[0, :2], kv.block_tables[1, :2])
    q = _q(3, 8, 64, torch.float32, cpu, seed=4)
    ref = paged_decode_attention_ref(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, 0.125)
    assert_rel_close(ref.double(), _oracle(q, kv, 0.125), 1e-5)
