"""The Triton kernels on GGUF blocks (quant_gemv for 1-8 rows, quant_gemm for many) against dequantize-then-matmul,
on fresh random blocks of every type, extreme scales included. Without CUDA they run under TRITON_INTERPRET=1 at
small shapes; on a GPU, natively."""
from __future__ import annotations

import pytest
import torch

from llmchat.kernels.quant_blocks import BLOCK_LAYOUTS, QuantWeight
from llmchat.kernels.quant_gemm import quant_gemm, quant_gemm_ref
from llmchat.kernels.quant_gemv import GEMV_MAX_ROWS, quant_gemv, quant_gemv_ref
from llmchat.kernels.quant_tile import TRITON_QTYPES
from quant_testing import random_blocks, summed_magnitude

# fp32 sums over K products of these magnitudes differ by at most K * 2^-23 * the summed magnitude (generously)
FP32_SUM = 2.0 ** -20


def _case(qtype: str, scale: float, seed: int, num_out: int, num_blocks: int, device: torch.device):
    gen = torch.Generator().manual_seed(seed)
    num_cols = BLOCK_LAYOUTS[qtype][0] * num_blocks
    data = random_blocks(qtype, num_out, num_cols, gen, scale)
    return QuantWeight(qtype, data.to(device), num_out, num_cols), data, gen


def _bound(data: torch.Tensor, qtype: str, x: torch.Tensor, rel: float) -> torch.Tensor:
    """Per output, rel * sum_k |x_k| * magnitude(w_nk): the rounding an fp32 (or rounded-weight) sum may add."""
    return rel * (x.double().abs().cpu() @ summed_magnitude(qtype, data).T) + 1e-30


@pytest.mark.parametrize("qtype", sorted(TRITON_QTYPES))
@pytest.mark.parametrize("scale", [0.02, 0.0, 3e4])
def test_quant_gemv_equals_dequantize_then_matmul(qtype, scale, triton_device):
    weight, data, gen = _case(qtype, scale, seed=len(qtype) * 7 + int(scale), num_out=37, num_blocks=2,
                              device=triton_device)
    for num_rows in (1, 3, GEMV_MAX_ROWS):
        x = torch.randn(num_rows, weight.in_features, generator=gen).to(triton_device)
        got = quant_gemv(x, weight).cpu().double()
        want = quant_gemv_ref(x, weight).cpu().double()
        assert got.shape == (num_rows, weight.out_features)
        err = (got - want).abs()
        assert torch.isfinite(got).all() == torch.isfinite(want).all()
        finite = torch.isfinite(want)
        assert (err[finite] <= _bound(data, qtype, x, FP32_SUM)[finite]).all(), (qtype, num_rows, err.max())


@pytest.mark.parametrize("qtype", sorted(TRITON_QTYPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quant_gemm_equals_rounded_dequantize_then_matmul(qtype, dtype, triton_device):
    weight, data, gen = _case(qtype, 0.02, seed=len(qtype) * 11, num_out=70, num_blocks=1, device=triton_device)
    x = torch.randn(45, weight.in_features, generator=gen).to(dtype).to(triton_device)  # 2 row tiles, one ragged
    got = quant_gemm(x, weight).cpu().double()
    want = quant_gemm_ref(x, weight).cpu().double()
    assert got.shape == (45, weight.out_features) and got.dtype == torch.float64
    out_round = 2.0 ** -7 if dtype == torch.bfloat16 else 0.0  # the output's own rounding to x's dtype
    bound = _bound(data, qtype, x.float(), FP32_SUM + out_round) + out_round * want.abs()
    assert ((got - want).abs() <= bound).all(), (qtype, dtype, (got - want).abs().max())


def test_quant_gemv_handles_no_rows_and_rejects_too_many(triton_device):
    weight, _, gen = _case("Q4_0", 0.02, seed=1, num_out=5, num_blocks=1, device=triton_device)
    assert quant_gemv(torch.zeros(0, 32, device=triton_device), weight).shape == (0, 5)
    with pytest.raises(AssertionError):
        quant_gemv(torch.zeros(GEMV_MAX_ROWS + 1, 32, device=triton_device), weight)


def test_ops_quant_linear_dispatches_to_triton_under_the_triton_backend(triton_device, monkeypatch):
    """ops.quant_linear: the Triton kernels under "triton" (GEMV up to GEMV_MAX_ROWS rows, GEMM above), equal to
    the reference; a Triton kernel is told apart by an input only it rejects (a non-contiguous weight)."""
    from llmchat.kernels import ops
    from llmchat.kernels.quant_linear import quant_linear_ref

    weight, _, gen = _case("Q4_K", 0.02, seed=5, num_out=9, num_blocks=1, device=triton_device)
    monkeypatch.setenv(ops.BACKEND_ENV, "triton")
    for num_rows in (2, GEMV_MAX_ROWS + 1):
        x = torch.randn(num_rows, weight.in_features, generator=gen).to(triton_device)
        torch.testing.assert_close(ops.quant_linear(x, weight, None), quant_linear_ref(x, weight),
                                   rtol=1e-5, atol=1e-5)
    strided = QuantWeight("Q4_K", torch.cat([weight.data, weight.data], dim=1)[:, ::2], 9, weight.in_features)
    with pytest.raises(AssertionError):
        ops.quant_linear(x, strided, None)
    monkeypatch.setenv(ops.BACKEND_ENV, "torch")
    assert ops.quant_linear(x, strided, None).shape == (x.shape[0], 9)  # the reference takes any layout
