"""Sliding window and score soft-capping in both paged attention kernels: Triton vs the torch reference, and
the reference vs a plain dense oracle written here (softmax over the masked, capped scores, in float64)."""
from __future__ import annotations

import pytest
import torch

from kernel_testing import assert_rel_close, make_paged_kv
from llmchat.kernels.paged_decode_attention import paged_decode_attention, paged_decode_attention_ref
from llmchat.kernels.paged_prefill_attention import paged_prefill_attention, paged_prefill_attention_ref

# (window, softcap): window alone (shorter than a block, longer than some sequences), cap alone, both
OPTIONS = [(5, 0.0), (40, 0.0), (0, 2.0), (7, 3.0)]
SEQ_LENS = [3, 19, 70, 33]
Q_LENS = [3, 7, 41, 1]  # new tokens per sequence (prefill): whole, partial, long, one


def dense_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first_pos: int, scale: float, window: int,
                 softcap: float) -> torch.Tensor:
    """q `[q_len, q_heads, d]` at positions first_pos.., k/v `[seq_len, kv_heads, d]`; float64."""
    group = q.shape[1] // k.shape[1]
    kk = k.double().repeat_interleave(group, 1).transpose(0, 1)  # [q_heads, seq_len, d]
    vv = v.double().repeat_interleave(group, 1).transpose(0, 1)
    scores = q.double().transpose(0, 1) @ kk.transpose(1, 2) * scale  # [q_heads, q_len, seq_len]
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    q_pos = torch.arange(first_pos, first_pos + q.shape[0])[:, None]
    k_pos = torch.arange(k.shape[0])[None, :]
    visible = (k_pos <= q_pos) & ((k_pos > q_pos - window) if window > 0 else True)
    scores = scores.masked_fill(~visible, float("-inf"))
    return (torch.softmax(scores, -1) @ vv).transpose(0, 1)  # [q_len, q_heads, d]


def _q(num_tokens: int, seed: int, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(num_tokens, 6, 32, generator=gen) * 2).to(device)


@pytest.mark.parametrize("window,softcap", OPTIONS)
def test_prefill_window_and_softcap(triton_device, window, softcap):
    kv = make_paged_kv(SEQ_LENS, 2, 32, 16, torch.float32, triton_device, num_shared_blocks=0, seed=window)
    q = _q(sum(Q_LENS), 1, triton_device)
    cu = torch.tensor([0, *torch.tensor(Q_LENS).cumsum(0).tolist()], dtype=torch.int32, device=triton_device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, cu, kv.seq_lens, 0.2)
    out = paged_prefill_attention(*args, block_m=16, block_n=16, window=window, softcap=softcap)
    ref = paged_prefill_attention_ref(*args, window=window, softcap=softcap, max_score_bytes=4096)  # chunked
    assert_rel_close(out, ref, 1e-5)
    expected = torch.cat([
        dense_oracle(q[s:e].cpu(), kv.keys[i].cpu(), kv.values[i].cpu(), SEQ_LENS[i] - (e - s), 0.2, window, softcap)
        for i, (s, e) in enumerate(zip(cu.tolist(), cu.tolist()[1:]))])
    assert_rel_close(ref.double().cpu(), expected, 1e-5)
    if window or softcap:  # the option does something on these inputs
        plain = paged_prefill_attention_ref(*args)
        assert (plain - ref).abs().max() > 1e-3


@pytest.mark.parametrize("window,softcap", OPTIONS)
@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_window_and_softcap(triton_device, window, softcap, num_splits):
    kv = make_paged_kv(SEQ_LENS, 2, 32, 16, torch.float32, triton_device, num_shared_blocks=0, seed=window + 1)
    q = _q(len(SEQ_LENS), 2, triton_device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.seq_lens, 0.2)
    out = paged_decode_attention(*args, num_splits=num_splits, block_n=16, window=window, softcap=softcap)
    ref = paged_decode_attention_ref(*args, window=window, softcap=softcap)
    assert_rel_close(out, ref, 1e-5)
    expected = torch.cat([dense_oracle(q[i : i + 1].cpu(), kv.keys[i].cpu(), kv.values[i].cpu(), n - 1, 0.2,
                                       window, softcap) for i, n in enumerate(SEQ_LENS)])
    assert_rel_close(ref.double().cpu(), expected, 1e-5)
