"""rope: Triton kernel vs torch reference; reference vs complex-number rotation; the cos/sin table vs fp64."""
from __future__ import annotations

import math

import pytest
import torch

from kernel_testing import assert_rel_close, tolerance
from llmchat.kernels.rope import rope, rope_cos_sin_cache, rope_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _qk(num_tokens: int, num_q_heads: int, num_kv_heads: int, head_dim: int, dtype, device, seed: int):
    """q and k as the model makes them: strided views into one fused qkv row per token."""
    gen = torch.Generator().manual_seed(seed)
    q_size, kv_size = num_q_heads * head_dim, num_kv_heads * head_dim
    qkv = torch.randn(num_tokens, q_size + 2 * kv_size, generator=gen).to(dtype).to(device)
    q = qkv[:, :q_size].view(num_tokens, num_q_heads, head_dim)
    k = qkv[:, q_size : q_size + kv_size].view(num_tokens, num_kv_heads, head_dim)
    positions = torch.randint(0, 8192, (num_tokens,), generator=gen).to(device)
    return q, k, positions


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("head_dim,num_q_heads,num_kv_heads,base", [(64, 9, 3, 100000.0), (128, 8, 1, 500000.0)])
def test_rope_kernel_matches_reference(triton_device, dtype, head_dim, num_q_heads, num_kv_heads, base):
    q, k, positions = _qk(11, num_q_heads, num_kv_heads, head_dim, dtype, triton_device, seed=head_dim)
    cos_sin = rope_cos_sin_cache(head_dim, 8192, base).to(triton_device)
    q_out = torch.full(q.shape, float("nan"), dtype=dtype, device=triton_device)  # poisoned
    k_out = torch.full(k.shape, float("nan"), dtype=dtype, device=triton_device)
    rope(q, k, positions, cos_sin, q_out=q_out, k_out=k_out)
    q_ref, k_ref = rope_ref(q, k, positions, cos_sin)
    fresh_q, fresh_k = rope(q, k, positions, cos_sin)
    assert fresh_q.is_contiguous() and fresh_k.is_contiguous() and torch.equal(fresh_q, q_out)
    assert_rel_close(q_out, q_ref, tolerance(dtype))
    assert_rel_close(k_out, k_ref, tolerance(dtype))


def test_rope_kernel_int32_positions(triton_device):
    q, k, positions = _qk(5, 4, 2, 64, torch.float32, triton_device, seed=5)
    cos_sin = rope_cos_sin_cache(64, 8192, 10000.0).to(triton_device)
    for got, want in zip(rope(q, k, positions.int(), cos_sin), rope_ref(q, k, positions, cos_sin)):
        assert_rel_close(got, want, 1e-5)


def test_rope_reference_is_a_complex_rotation():
    """Pair dim j with dim j + half as the complex number x_j + i x_{j+half}; RoPE multiplies it by e^(i p theta_j)."""
    head_dim, base = 64, 100000.0
    q, k, positions = _qk(6, 3, 1, head_dim, torch.float32, torch.device("cpu"), seed=2)
    q_out, _ = rope_ref(q, k, positions, rope_cos_sin_cache(head_dim, 8192, base))
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # [half]
    angle = positions.double()[:, None, None] * theta  # [num_tokens, 1, half]
    z = torch.complex(q[..., : head_dim // 2].double(), q[..., head_dim // 2 :].double()) * torch.polar(
        torch.ones_like(angle), angle)
    expected = torch.cat([z.real, z.imag], dim=-1)
    # fp32 angles at positions up to 8192 carry ~1e-3 rad of rounding, as in Hugging Face's own table
    assert (q_out.double() - expected).abs().max() < 5e-3


def test_rope_cos_sin_cache_layout():
    head_dim, base = 8, 10000.0
    cache = rope_cos_sin_cache(head_dim, 100, base)
    assert cache.shape == (100, head_dim) and cache.dtype == torch.float32
    for p in (0, 1, 37, 99):
        for j in range(head_dim // 2):
            angle = p / base ** (2 * j / head_dim)
            assert math.isclose(cache[p, j].item(), math.cos(angle), abs_tol=1e-5)
            assert math.isclose(cache[p, head_dim // 2 + j].item(), math.sin(angle), abs_tol=1e-5)
