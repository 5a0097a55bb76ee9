"""kernels/ops.py: which implementation runs (argument > LLMCHAT_KERNEL_BACKEND > device), and both agree."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from kernel_testing import assert_rel_close, make_paged_kv
from llmchat.kernels import ops
from llmchat.kernels.triton_support import HAS_TRITON


def test_resolve_backend_order(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv(ops.BACKEND_ENV, raising=False)
    assert ops.resolve_backend(None, cpu) == "torch"
    assert ops.resolve_backend(None, cuda) == ("triton" if HAS_TRITON else "torch")
    assert ops.resolve_backend("triton", cpu) == "triton"
    monkeypatch.setenv(ops.BACKEND_ENV, "triton")
    assert ops.resolve_backend(None, cpu) == "triton"
    assert ops.resolve_backend("torch", cpu) == "torch"  # the argument wins over the environment
    monkeypatch.setenv(ops.BACKEND_ENV, "cuda")
    with pytest.raises(ValueError, match="use 'triton' or 'torch'"):
        ops.resolve_backend(None, cpu)
    with pytest.raises(ValueError, match="LLMCHAT_KERNEL_BACKEND"):
        ops.resolve_backend(None, cpu)


def test_forced_backend_is_the_one_that_runs(triton_device, monkeypatch):
    """A batch only the torch reference accepts (Triton wants int32 block tables) tells the paths apart."""
    monkeypatch.delenv(ops.BACKEND_ENV, raising=False)
    kv = make_paged_kv([5, 9], 1, 64, 16, torch.float32, triton_device, seed=1)
    q = torch.randn(2, 2, 64, device=triton_device)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables.long(), kv.seq_lens, 0.125)
    assert ops.paged_decode_attention(*args, backend="torch").shape == q.shape
    with pytest.raises(AssertionError, match="int32"):
        ops.paged_decode_attention(*args, backend="triton")
    monkeypatch.setenv(ops.BACKEND_ENV, "triton")
    with pytest.raises(AssertionError, match="int32"):
        ops.paged_decode_attention(*args)
    assert ops.paged_decode_attention(*args, backend="torch").shape == q.shape


def test_backends_agree_through_ops(triton_device):
    """One decoder layer's worth of calls, made through ops with each backend, gives the same tensors."""
    gen = torch.Generator().manual_seed(0)
    dev = triton_device
    num_q_heads, num_kv_heads, head_dim, block_size = 6, 2, 64, 16
    seq_lens, q_lens = [20, 7], [4, 7]
    slots = torch.tensor([16, 17, 18, 19, 64, 65, 66, 67, 68, 69, 70], device=dev)  # seq 0: block 1, seq 1: block 4
    x = torch.randn(11, 128, generator=gen).to(dev)
    residual = torch.randn(11, 128, generator=gen).to(dev)
    weight = torch.randn(128, generator=gen).to(dev)
    q = torch.randn(11, num_q_heads, head_dim, generator=gen).to(dev)
    k = torch.randn(11, num_kv_heads, head_dim, generator=gen).to(dev)
    v = torch.randn(11, num_kv_heads, head_dim, generator=gen).to(dev)
    positions = torch.tensor([16, 17, 18, 19, 0, 1, 2, 3, 4, 5, 6], device=dev)
    cos_sin = ops.rope_cos_sin_cache(head_dim, 64, 10000.0).to(dev)
    empty = torch.full((6, block_size, num_kv_heads, head_dim), float("nan"), device=dev)  # NaN: never written
    prefix_k = torch.randn(block_size, num_kv_heads, head_dim, generator=gen).to(dev)  # seq 0's cached block 0
    prefix_v = torch.randn(block_size, num_kv_heads, head_dim, generator=gen).to(dev)
    tables = torch.tensor([[0, 1], [4, 5]], dtype=torch.int32, device=dev)
    cu = torch.tensor([0, 4, 11], dtype=torch.int32, device=dev)
    results = {}
    for backend in ("torch", "triton"):
        k_cache, v_cache = empty.clone(), empty.clone()
        k_cache[0], v_cache[0] = prefix_k, prefix_v
        h, res = ops.rms_norm(x, weight, 1e-5, residual, backend=backend)
        qr, kr = ops.rope(q, k, positions, cos_sin, backend=backend)
        ops.store_kv(kr, v, k_cache, v_cache, slots, backend=backend)
        seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32, device=dev)
        pre = ops.paged_prefill_attention(qr, k_cache, v_cache, tables, cu, seq_lens_t, 0.125, backend=backend)
        dec = ops.paged_decode_attention(qr[cu[1:] - 1], k_cache, v_cache, tables, seq_lens_t, 0.125, backend=backend)
        results[backend] = (h, res, qr, kr, pre, dec)
    for got, want in zip(results["triton"], results["torch"]):
        assert_rel_close(got, want, 1e-5)
    assert_rel_close(results["torch"][5], results["torch"][4][cu[1:] - 1], 1e-5)  # last prefill row == decode


def test_ops_import_and_torch_path_without_triton():
    """Where `triton` is missing (macOS), importing ops works, the torch path runs, Triton explains itself."""
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # import triton -> ImportError
        import torch
        from llmchat.kernels import ops
        x = torch.randn(3, 8)
        out = ops.rms_norm(x, torch.ones(8), 1e-6)
        assert out.shape == (3, 8)
        try:
            ops.rms_norm(x, torch.ones(8), 1e-6, backend="triton")
        except RuntimeError as e:
            assert "backend='torch'" in str(e), e
            print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != ops.BACKEND_ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
