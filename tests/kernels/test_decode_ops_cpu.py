"""The C++ CPU kernels of a decode step's small ops (kernels/csrc/decode_ops.cpp) against their torch references,
on fresh random inputs: RMSNorm (with and without the residual add, strided head views), RoPE (full and partial,
in place on views of one qkv row), SiLU * up, the KV store (slot -1 skipped) and paged decode attention (GQA,
ragged lengths, block tables padded with an all-NaN block, stale NaN slots: never read; sliding window,
soft-capping)."""
from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from kernel_testing import make_paged_kv
from llmchat.kernels import ops
from llmchat.kernels.paged_decode_attention import paged_decode_attention_ref
from llmchat.kernels.quant_cpu_build import load_cpu_kernels
from llmchat.kernels.rms_norm import rms_norm_ref
from llmchat.kernels.rope import rope_cos_sin_cache, rope_ref
from llmchat.kernels.store_kv import store_kv_ref

TOL = dict(rtol=1e-5, atol=1e-5)  # fp32 both sides; sums in other orders


@pytest.fixture(scope="module", params=("native", "x86-64"))  # this CPU's best, and the scalar fallback
def cpu(request):
    kernels = load_cpu_kernels(str(Path(os.environ["LLMCHAT_CACHE_DIR"]) / "kernels"), request.param)
    assert kernels.module is not None, kernels.note
    return kernels.module


def _gen(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))  # not hash(): PYTHONHASHSEED varies it


@pytest.mark.parametrize("num_rows,dim", [(1, 576), (3, 64), (70, 2048), (2, 7)])
def test_rms_norm_matches_the_reference(cpu, num_rows, dim):
    gen = _gen(f"norm{num_rows}")
    x, residual = torch.randn(num_rows, dim, generator=gen) * 30, torch.randn(num_rows, dim, generator=gen)
    weight = torch.randn(dim, generator=gen)
    torch.testing.assert_close(ops.rms_norm(x, weight, 1e-6, cpu=cpu), rms_norm_ref(x, weight, 1e-6), **TOL)
    out, h = ops.rms_norm(x, weight, 1e-6, residual, cpu=cpu)
    ref_out, ref_h = rms_norm_ref(x, weight, 1e-6, residual)
    assert torch.equal(h, ref_h)
    torch.testing.assert_close(out, ref_out, **TOL)


def test_rms_norm_of_strided_head_views(cpu):
    """q/k norm (Qwen3): [tokens, heads, head_dim] views of one qkv row, normalized per head."""
    gen = _gen("heads")
    qkv = torch.randn(5, 16 * 32 + 8, generator=gen)
    q = qkv[:, : 16 * 32].view(5, 16, 32)
    weight = torch.randn(32, generator=gen)
    torch.testing.assert_close(ops.rms_norm(q, weight, 1e-6, cpu=cpu), rms_norm_ref(q, weight, 1e-6), **TOL)


@pytest.mark.parametrize("head_dim,rotary_dim", [(64, 64), (128, 128), (96, 32)])
def test_rope_turns_views_in_place_as_the_reference(cpu, head_dim, rotary_dim):
    gen = _gen(f"rope{head_dim}")
    num_tokens, num_q, num_kv = 4, 6, 2
    qkv = torch.randn(num_tokens, (num_q + 2 * num_kv) * head_dim, generator=gen)
    q = qkv[:, : num_q * head_dim].view(num_tokens, num_q, head_dim)
    k = qkv[:, num_q * head_dim : (num_q + num_kv) * head_dim].view(num_tokens, num_kv, head_dim)
    v_before = qkv[:, (num_q + num_kv) * head_dim :].clone()
    positions = torch.tensor([0, 7, 4095, 3])
    table = rope_cos_sin_cache(rotary_dim, 4096, 500000.0)
    r = rotary_dim
    ref_q, ref_k = rope_ref(q[..., :r].clone(), k[..., :r].clone(), positions, table)
    ref_q, ref_k = torch.cat([ref_q, q[..., r:]], -1), torch.cat([ref_k, k[..., r:]], -1)
    got_q, got_k = ops.rope(q, k, positions, table, cpu=cpu)
    assert got_q.data_ptr() == q.data_ptr()  # in place
    torch.testing.assert_close(got_q, ref_q, **TOL)
    torch.testing.assert_close(got_k, ref_k, **TOL)
    assert torch.equal(qkv[:, (num_q + num_kv) * head_dim :], v_before)  # v untouched
    with pytest.raises(RuntimeError, match="position"):
        ops.rope(q, k, torch.tensor([0, 1, 2, 4096]), table, cpu=cpu)


def test_partial_rotary_on_the_reference_path_keeps_the_rest():
    gen = _gen("partial")
    q, k = torch.randn(3, 4, 96, generator=gen), torch.randn(3, 2, 96, generator=gen)
    got_q, _ = ops.rope(q, k, torch.tensor([1, 2, 3]), rope_cos_sin_cache(32, 16, 10000.0))
    assert torch.equal(got_q[..., 32:], q[..., 32:]) and not torch.equal(got_q[..., :32], q[..., :32])


@pytest.mark.parametrize("num_rows,size", [(1, 1536), (9, 8192), (2, 5)])
def test_silu_and_mul_matches_the_reference(cpu, num_rows, size):
    gen = _gen(f"silu{size}")
    gate_up = torch.randn(num_rows, 2 * size, generator=gen) * 8
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(ops.silu_and_mul(gate_up, cpu), F.silu(gate) * up, **TOL)


def test_store_kv_writes_the_slots_and_skips_minus_one(cpu):
    gen = _gen("store")
    k_cache, v_cache = torch.randn(6, 16, 3, 64, generator=gen), torch.randn(6, 16, 3, 64, generator=gen)
    kv = torch.randn(4, 6 * 64, generator=gen)
    k, v = kv[:, : 3 * 64].view(4, 3, 64), kv[:, 3 * 64 :].view(4, 3, 64)
    slots = torch.tensor([5, -1, 95, 16])
    ref_k, ref_v = k_cache.clone(), v_cache.clone()
    store_kv_ref(k, v, ref_k, ref_v, slots)
    ops.store_kv(k, v, k_cache, v_cache, slots, cpu=cpu)
    assert torch.equal(k_cache, ref_k) and torch.equal(v_cache, ref_v)
    with pytest.raises(RuntimeError, match="outside the cache"):
        ops.store_kv(k, v, k_cache, v_cache, torch.tensor([5, 6, 7, 96]), cpu=cpu)


CASES = [  # (num_q_heads, num_kv_heads, head_dim, block_size, window, softcap)
    (9, 3, 64, 16, 0, 0.0), (8, 8, 128, 16, 0, 0.0), (8, 1, 64, 32, 0, 0.0), (8, 2, 256, 16, 20, 0.0),
    (4, 2, 64, 16, 0, 50.0), (16, 8, 128, 16, 4096, 30.0),
]


@pytest.mark.parametrize("num_q,num_kv,head_dim,block_size,window,softcap", CASES)
def test_paged_decode_attention_matches_the_reference(cpu, num_q, num_kv, head_dim, block_size, window, softcap):
    seq_lens = [1, block_size - 1, 2 * block_size, 5 * block_size + 3, 70 * block_size + 1]  # the last runs parallel
    kv = make_paged_kv(seq_lens, num_kv, head_dim, block_size, torch.float32, torch.device("cpu"), seed=num_q)
    gen = _gen(f"attn{num_q}{head_dim}")
    q = torch.randn(len(seq_lens), num_q, head_dim, generator=gen)
    scale = head_dim**-0.5
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, scale)
    got = ops.paged_decode_attention(*args, window=window, softcap=softcap, cpu=cpu)
    torch.testing.assert_close(got, paged_decode_attention_ref(*args, window, softcap), **TOL)


def test_paged_decode_attention_refuses_a_block_outside_the_cache(cpu):
    kv = make_paged_kv([20], 2, 64, 16, torch.float32, torch.device("cpu"))
    q = torch.randn(1, 4, 64)
    tables = kv.block_tables.clone()
    tables[0, 1] = kv.k_cache.shape[0]
    with pytest.raises(RuntimeError, match="outside the cache"):
        ops.paged_decode_attention(q, kv.k_cache, kv.v_cache, tables, kv.seq_lens, 0.125, cpu=cpu)


def test_other_dtypes_and_no_kernels_take_the_reference():
    q = torch.randn(2, 4, 64, dtype=torch.bfloat16)
    x = torch.randn(2, 64, dtype=torch.bfloat16)

    class NoCalls:
        def __getattr__(self, name):
            raise AssertionError(f"the C++ kernel {name} was called on bf16")

    ones = torch.ones(64)
    torch.testing.assert_close(ops.rms_norm(x, ones, 1e-6, cpu=NoCalls()), rms_norm_ref(x, ones, 1e-6))
    assert ops.rope(q, q[:, :2], torch.tensor([1, 2]), rope_cos_sin_cache(64, 8, 1e4), cpu=NoCalls())[0].shape == q.shape
