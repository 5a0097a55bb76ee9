"""rope: rotary position embedding, Llama / Hugging Face "rotate-half" convention, one token per program.

For a head vector x split into halves x1 = x[:half], x2 = x[half:], at position p:
    out = cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin),   cos/sin = cos/sin(p * inv_freq)
with the math in fp32 and the result rounded to the input dtype.
"""
from __future__ import annotations

import torch

from .triton_support import check_launchable, jit, next_power_of_2, tl


def rope_cos_sin_cache(head_dim: int, max_positions: int, base: float) -> torch.Tensor:
    """fp32 `[max_positions, head_dim]`: row p = cat(cos(p * inv_freq), sin(p * inv_freq)),
    inv_freq = 1 / base ** (arange(0, head_dim, 2) / head_dim), as Hugging Face computes it."""
    assert head_dim % 2 == 0, head_dim
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))  # [half]
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.int64).float(), inv_freq)  # [max_positions, half]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)  # [max_positions, head_dim]


@jit
def _rope_rotate(x_ptr, out_ptr, token, cos, sin, stride_x_tok, stride_x_head, stride_out_tok, stride_out_head,
                 num_heads, HALF: tl.constexpr, HEADS_PAD: tl.constexpr, HALF_PAD: tl.constexpr):
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HALF_PAD)
    mask = (heads[:, None] < num_heads) & (dims[None, :] < HALF)
    src = x_ptr + token * stride_x_tok + heads[:, None] * stride_x_head + dims[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dst = out_ptr + token * stride_out_tok + heads[:, None] * stride_out_head + dims[None, :]
    tl.store(dst, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=mask)


@jit
def _rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, positions_ptr, cos_sin_ptr,
    stride_q_tok, stride_q_head, stride_k_tok, stride_k_head,
    stride_q_out_tok, stride_q_out_head, stride_k_out_tok, stride_k_out_head, stride_cos_sin,
    num_q_heads, num_kv_heads,
    HALF: tl.constexpr,
    Q_HEADS_PAD: tl.constexpr,
    KV_HEADS_PAD: tl.constexpr,
    HALF_PAD: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + token).to(tl.int64)
    dims = tl.arange(0, HALF_PAD)
    cos = tl.load(cos_sin_ptr + pos * stride_cos_sin + dims, mask=dims < HALF, other=0.0)[None, :]
    sin = tl.load(cos_sin_ptr + pos * stride_cos_sin + HALF + dims, mask=dims < HALF, other=0.0)[None, :]
    _rope_rotate(q_ptr, q_out_ptr, token, cos, sin, stride_q_tok, stride_q_head, stride_q_out_tok,
                 stride_q_out_head, num_q_heads, HALF, Q_HEADS_PAD, HALF_PAD)
    _rope_rotate(k_ptr, k_out_ptr, token, cos, sin, stride_k_tok, stride_k_head, stride_k_out_tok,
                 stride_k_out_head, num_kv_heads, HALF, KV_HEADS_PAD, HALF_PAD)


def rope(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
    q_out: torch.Tensor | None = None, k_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q `[num_tokens, num_q_heads, head_dim]`, k `[num_tokens, num_kv_heads, head_dim]` (any token/head
    strides), positions int `[num_tokens]`, cos_sin_cache fp32 `[max_positions, head_dim]`
    (see rope_cos_sin_cache). Returns (q, k) rotated, in new contiguous tensors or in q_out / k_out."""
    check_launchable(q, k, positions, cos_sin_cache)
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    assert k.shape == (num_tokens, num_kv_heads, head_dim) and k.dtype == q.dtype, (q.shape, k.shape)
    assert positions.shape == (num_tokens,) and positions.dtype in (torch.int32, torch.int64)
    assert cos_sin_cache.dtype == torch.float32 and cos_sin_cache.shape[1] == head_dim, cos_sin_cache.shape
    assert cos_sin_cache.stride(1) == 1 and q.stride(-1) == 1 and k.stride(-1) == 1
    assert head_dim % 2 == 0, head_dim
    if q_out is None:
        q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # [num_tokens, num_q_heads, head_dim]
    if k_out is None:
        k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)  # [num_tokens, num_kv_heads, head_dim]
    assert q_out.shape == q.shape and k_out.shape == k.shape and q_out.dtype == k_out.dtype == q.dtype
    assert q_out.stride(-1) == 1 and k_out.stride(-1) == 1
    if num_tokens > 0:
        _rope_kernel[(num_tokens,)](
            q, k, q_out, k_out, positions, cos_sin_cache,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1), cos_sin_cache.stride(0),
            num_q_heads, num_kv_heads,
            HALF=head_dim // 2,
            Q_HEADS_PAD=next_power_of_2(num_q_heads),
            KV_HEADS_PAD=next_power_of_2(num_kv_heads),
            HALF_PAD=next_power_of_2(head_dim // 2),
        )
    return q_out, k_out


def rope_ref(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain torch: gather each token's cos/sin row, rotate halves in fp32, round to the input dtype."""
    cos, sin = cos_sin_cache[positions].unsqueeze(1).chunk(2, dim=-1)  # each [num_tokens, 1, half]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float().chunk(2, dim=-1)  # each [num_tokens, num_heads, half]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    return rotate(q), rotate(k)
