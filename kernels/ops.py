"""The one dispatch point for the engine's kernels: Triton on CUDA tensors, the torch reference otherwise.

Choice of backend, first match wins:
  1. the `backend` argument ("triton" or "torch");
  2. the environment variable LLMCHAT_KERNEL_BACKEND ("triton" or "torch");
  3. CUDA tensors (and `triton` installed) -> "triton"; anything else -> "torch".
"triton" on CPU tensors runs Triton's interpreter (TRITON_INTERPRET=1, the default on machines
without CUDA, see triton_support.py): slow, meant for tests.

On CPU the C++ kernels (csrc/, built by quant_cpu_build.py) are the production path where the caller passes
them in (`cpu`, or `cpu_kernels` for the quantized linear; None: the torch references, plain batched torch):
the linear on GGUF-quantized weights (quant_linear.py) and, on fp32 tensors, a decode step's small ops
(csrc/decode_ops.cpp: RMSNorm, RoPE, SiLU * up, the KV store and the decode attention), each one call where
the reference takes a handful of torch ops. Under "triton" it is quant_gemv.py (up to
GEMV_MAX_ROWS rows) or quant_gemm.py, both read the blocks as stored; tested under the interpreter, not yet on
a GPU, so the loader still dequantizes a GGUF to bf16 on CUDA (core/model/loader.py resolve_weight_dtype).
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import Literal

import torch
from torch.nn import functional as F

from . import paged_decode_attention as _decode
from . import paged_prefill_attention as _prefill
from . import quant_linear as _quant_linear
from .quant_gemm import quant_gemm
from .quant_gemv import GEMV_MAX_ROWS, quant_gemv
from .quant_tile import TRITON_QTYPES
from . import rms_norm as _rms_norm
from . import rope as _rope
from . import store_kv as _store_kv
from .quant_blocks import QuantWeight
from .rope import rope_cos_sin_cache
from .triton_support import HAS_TRITON

__all__ = [
    "BACKEND_ENV", "Backend", "resolve_backend", "store_kv", "paged_decode_attention",
    "paged_prefill_attention", "rms_norm", "rope", "silu_and_mul", "rope_cos_sin_cache", "QuantWeight", "quant_linear",
    "dequantize_rows",
]

Backend = Literal["triton", "torch"]
BACKEND_ENV = "LLMCHAT_KERNEL_BACKEND"


def resolve_backend(backend: str | None, device: torch.device) -> Backend:
    """Which implementation runs for tensors on `device` (see the module docstring for the order)."""
    choice = backend or os.environ.get(BACKEND_ENV) or None
    if choice is None:
        return "triton" if device.type == "cuda" and HAS_TRITON else "torch"
    if choice not in ("triton", "torch"):
        source = "backend argument" if backend else BACKEND_ENV
        raise ValueError(f"unknown kernel backend {choice!r} (from the {source}): use 'triton' or 'torch'")
    return choice  # type: ignore[return-value]


def _on_cpu_kernels(cpu: ModuleType | None, backend: str | None, *tensors: torch.Tensor) -> bool:
    """Whether the C++ CPU kernels take this call: given, not overruled by "triton", every tensor fp32 on the CPU."""
    if cpu is None or backend == "triton":
        return False
    for t in tensors:
        if t.dtype != torch.float32 or not t.is_cpu:
            return False
    return backend == "torch" or resolve_backend(backend, tensors[0].device) == "torch"


def store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
    backend: str | None = None, cpu: ModuleType | None = None,
) -> None:
    """Write k, v `[num_tokens, num_kv_heads, head_dim]` into the paged caches
    `[num_blocks, block_size, num_kv_heads, head_dim]` at slot_mapping `[num_tokens]`
    (slot = block_id * block_size + offset; -1 skips the token). In place."""
    if _on_cpu_kernels(cpu, backend, k, v, k_cache, v_cache) and slot_mapping.dtype == torch.int64:
        cpu.store_kv(k, v, k_cache, v_cache, slot_mapping)
    elif resolve_backend(backend, k.device) == "triton":
        _store_kv.store_kv(k, v, k_cache, v_cache, slot_mapping)
    else:
        _store_kv.store_kv_ref(k, v, k_cache, v_cache, slot_mapping)


def paged_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    seq_lens: torch.Tensor, scale: float, backend: str | None = None, window: int = 0, softcap: float = 0.0,
    cpu: ModuleType | None = None,
) -> torch.Tensor:
    """One query token per sequence, q `[num_seqs, num_q_heads, head_dim]`, over its seq_lens[i] cached
    tokens (the current one included; only the last `window` when window > 0) read through block_tables
    int32 `[num_seqs, max_blocks_per_seq]`; softcap > 0 caps the scores at softcap * tanh(s / softcap).
    Returns `[num_seqs, num_q_heads, head_dim]` in q's dtype."""
    if _on_cpu_kernels(cpu, backend, q, k_cache, v_cache) and block_tables.dtype == seq_lens.dtype == torch.int32:
        return cpu.paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, window, softcap)
    if resolve_backend(backend, q.device) == "triton":
        return _decode.paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, window=window,
                                              softcap=softcap)
    return _decode.paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, scale, window, softcap)


def paged_prefill_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor, scale: float, backend: str | None = None,
    max_q_len: int | None = None, window: int = 0, softcap: float = 0.0,
) -> torch.Tensor:
    """Packed new tokens q `[num_new_tokens, num_q_heads, head_dim]` (sequence i owns rows
    cu_seqlens_q[i]:cu_seqlens_q[i+1], the last positions of its seq_lens[i]-token context, all of whose
    K/V are already stored) attend causally (to the last `window` keys only when window > 0; scores capped
    at softcap * tanh(s / softcap) when softcap > 0). max_q_len, when the caller knows it, spares Triton a sync."""
    if resolve_backend(backend, q.device) == "triton":
        return _prefill.paged_prefill_attention(
            q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale, max_q_len=max_q_len, window=window,
            softcap=softcap,
        )
    return _prefill.paged_prefill_attention_ref(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale,
                                                window=window, softcap=softcap)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None,
    backend: str | None = None, cpu: ModuleType | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Without residual: weight * x / rms(x). With residual: h = x + residual, returns (weight * h / rms(h), h)."""
    if _on_cpu_kernels(cpu, backend, x, weight) and (residual is None or (
            residual.dtype == torch.float32 and x.dim() == 2 and residual.shape == x.shape)):
        return cpu.rms_norm(x, weight, eps) if residual is None else tuple(cpu.add_rms_norm(x, residual, weight, eps))
    if resolve_backend(backend, x.device) == "triton":
        return _rms_norm.rms_norm(x, weight, eps, residual)
    return _rms_norm.rms_norm_ref(x, weight, eps, residual)


def rope(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
    backend: str | None = None, cpu: ModuleType | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE of q `[num_tokens, num_q_heads, head_dim]` and k `[num_tokens, num_kv_heads, head_dim]`
    at positions `[num_tokens]`, with cos_sin_cache from rope_cos_sin_cache; a table narrower than the heads
    turns only their first dims (partial rotary), the rest pass through. Returns the rotated (q, k): new
    tensors, or q and k themselves turned in place on the C++ CPU kernels."""
    if _on_cpu_kernels(cpu, backend, q, k, cos_sin_cache) and positions.dtype == torch.int64:
        cpu.rope_(q, k, positions.contiguous(), cos_sin_cache)
        return q, k
    r = cos_sin_cache.shape[1]
    if r < q.shape[-1]:  # partial rotary: the first r dims turn
        q_rot, k_rot = rope(q[..., :r], k[..., :r], positions, cos_sin_cache, backend)
        return torch.cat([q_rot, q[..., r:]], dim=-1), torch.cat([k_rot, k[..., r:]], dim=-1)
    if resolve_backend(backend, q.device) == "triton":
        return _rope.rope(q, k, positions, cos_sin_cache)
    return _rope.rope_ref(q, k, positions, cos_sin_cache)


def silu_and_mul(gate_up: torch.Tensor, cpu: ModuleType | None = None) -> torch.Tensor:
    """silu(gate) * up of gate_up `[num_rows, 2 * intermediate]` (gate first): SwiGLU's middle."""
    if _on_cpu_kernels(cpu, None, gate_up) and gate_up.dim() == 2:
        return cpu.silu_and_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def quant_linear(
    x: torch.Tensor, weight: QuantWeight, cpu_kernels: ModuleType | None, scratch: torch.Tensor | None = None,
) -> torch.Tensor:
    """x `[num_rows, in_features]` @ the GGUF-quantized weight `[out_features, in_features]`.T, in x's dtype:
    integer dots on the quantized bytes for few rows, dequantize (into `scratch`) + GEMM for many; under
    "triton", dequantize-in-registers GEMV for few rows, tiled GEMM for many."""
    if weight.qtype in TRITON_QTYPES and resolve_backend(None, x.device) == "triton":
        return quant_gemv(x, weight) if x.shape[0] <= GEMV_MAX_ROWS else quant_gemm(x, weight)
    return _quant_linear.quant_linear(x, weight, cpu_kernels, scratch)


def dequantize_rows(weight: QuantWeight, row_ids: torch.Tensor, cpu_kernels: ModuleType | None) -> torch.Tensor:
    """Rows `row_ids` `[num_ids]` of a quantized table as fp32 `[num_ids, in_features]` (an embedding lookup)."""
    return _quant_linear.dequantize_rows(weight, row_ids, cpu_kernels)
