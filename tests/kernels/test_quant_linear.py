"""The quantized CPU linear (C++, every build a machine may get) against the dequantize-then-matmul reference,
on fresh random GGUF blocks and activations, for every row count the engine feeds, extreme scales included."""
import os
import zlib
from pathlib import Path

import pytest
import torch

from llmchat.kernels.quant_blocks import BLOCK_LAYOUTS, QuantWeight, dequantize_ref
from llmchat.kernels.quant_cpu_build import load_cpu_kernels
from llmchat.kernels.quant_linear import (
    GEMM_MIN_ROWS, dequantize_rows, gemm_dtype, qtype_number, quant_linear, quant_linear_ref,
    quantize_activations_ref,
)
from quant_testing import random_blocks, summed_magnitude

NUM_ROWS = (1, 2, 3, 4, 5, 7, 8, 9, GEMM_MIN_ROWS - 1, GEMM_MIN_ROWS, 33)
ARCHES = ("native", "haswell", "x86-64")  # this CPU's best; AVX2 without VNNI; the scalar fallback


def _cpu_flags() -> set[str]:
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    return set(next((line for line in lines if line.startswith("flags")), "").split())


@pytest.fixture(scope="session", params=ARCHES)
def cpu_kernels(request):
    if request.param == "haswell" and not {"avx2", "fma", "f16c"} <= _cpu_flags():
        pytest.skip("this CPU cannot run an AVX2 build")
    build_dir = Path(os.environ["LLMCHAT_CACHE_DIR"]) / "kernels"  # linked to the real cache by tests/conftest.py
    kernels = load_cpu_kernels(str(build_dir), request.param)
    assert kernels.module is not None, kernels.note  # g++ and ninja are on every machine the project tests on
    expected = {"native": None, "haswell": "avx2", "x86-64": "scalar"}[request.param]
    assert expected is None or kernels.module.simd() == expected
    return kernels.module


def _case(qtype: str, scale: float, seed: int, num_out: int = 23, num_blocks: int = 3):
    gen = torch.Generator().manual_seed(seed)
    num_cols = BLOCK_LAYOUTS[qtype][0] * num_blocks
    return QuantWeight(qtype, random_blocks(qtype, num_out, num_cols, gen, scale), num_out, num_cols), gen


def _activations(num_rows: int, num_cols: int, gen: torch.Generator) -> torch.Tensor:
    """Gaussian rows at magnitudes from 1e-4 to 1e3, one all-zero row, one row with a single outlier."""
    x = torch.randn(num_rows, num_cols, generator=gen) * 10.0 ** torch.randint(-4, 4, (num_rows, 1), generator=gen)
    if num_rows > 2:
        x[1] = 0.0
        x[2, int(torch.randint(0, num_cols, (1,), generator=gen))] = 1e4
    return x


@pytest.mark.parametrize("scale", [0.02, 1e-6, 65504.0])
@pytest.mark.parametrize("qtype", list(BLOCK_LAYOUTS))
def test_matches_reference_on_its_own_rounding(cpu_kernels, qtype, scale, many_rows_gemm):
    """Fed the activations as the kernel rounds them (int8 per 32-block), the fast path equals the reference up
    to fp32 summation of the terms it adds; the GEMM path (many rows) sees the unrounded activations."""
    weight, gen = _case(qtype, scale, seed=zlib.crc32(f"{qtype} {scale}".encode()))
    w64 = dequantize_ref(weight).double()
    magnitude = summed_magnitude(qtype, weight.data)
    for num_rows in NUM_ROWS:
        x = _activations(num_rows, weight.in_features, gen)
        got = quant_linear(x, weight, cpu_kernels)
        assert got.shape == (num_rows, weight.out_features) and got.dtype == torch.float32
        on_gemm = num_rows >= GEMM_MIN_ROWS and many_rows_gemm is not None
        seen = x if on_gemm else quantize_activations_ref(x)
        want = seen.double() @ w64.T
        bound = 1e-5 * (seen.double().abs() @ magnitude.T) + 1e-30
        if on_gemm:
            bound = bound + gemm_rounding(x, magnitude)
        assert bool(((got.double() - want).abs() <= bound).all()), (num_rows, (got.double() - want).abs().max())


def gemm_rounding(x: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor | float:
    """What the many-rows path may add by multiplying in gemm_dtype(): in bf16 (8 significant bits), half a bf16
    step (up to 2^-8 relative) on each activation, each weight and the output (oneDNN's bf16 linear returns bf16),
    so at most 3 * 2^-8 (and their products) of sum |x| * |w|, bounded here by 2^-6; 0 in fp32. (Measured: up
    to 1.05 * 2^-7 over 30 seeds of each case.)"""
    if gemm_dtype() != torch.bfloat16:
        return 0.0
    return 2.0**-6 * (x.double().abs() @ magnitude.T)


@pytest.mark.parametrize("qtype", list(BLOCK_LAYOUTS))
def test_error_from_int8_activations_is_within_half_a_step(cpu_kernels, qtype):
    """Against the exact product on the unrounded activations, each output is off by at most half an int8 step
    of each activation block times that block's |weights| (plus fp32 summation)."""
    weight, gen = _case(qtype, 0.05, seed=hash(qtype) % 2**31, num_out=41, num_blocks=4)
    w64 = dequantize_ref(weight).double()
    magnitude = summed_magnitude(qtype, weight.data)
    for num_rows in NUM_ROWS:
        x = _activations(num_rows, weight.in_features, gen)
        got = quant_linear(x, weight, cpu_kernels).double()
        want = x.double() @ w64.T
        half_step = (x.abs().reshape(num_rows, -1, 32).amax(-1) / 254.0).repeat_interleave(32, dim=1).double()
        bound = half_step @ w64.abs().T + 1e-5 * (x.double().abs() @ magnitude.T) + 1e-30
        assert bool(((got - want).abs() <= bound).all()), num_rows


@pytest.mark.parametrize("qtype", list(BLOCK_LAYOUTS))
def test_dequantize_and_row_lookup_match_reference(cpu_kernels, qtype):
    weight, gen = _case(qtype, 0.3, seed=7 + hash(qtype) % 1000, num_out=19)
    want = dequantize_ref(weight)
    ids = torch.randint(0, weight.out_features, (11,), generator=gen)
    ulp_bound = 2.0**-23 * summed_magnitude(qtype, weight.data)[ids]  # the C++ path fuses scale * u + offset
    assert bool(((dequantize_rows(weight, ids, cpu_kernels) - want[ids]).abs() <= ulp_bound).all())
    scratch = torch.full((weight.out_features * weight.in_features + 5,), float("nan"))
    whole = cpu_kernels.dequantize(weight.data, qtype_number(qtype), weight.out_features, weight.in_features,
                                   None, scratch)
    assert whole.data_ptr() == scratch.data_ptr()
    assert bool(((whole - want).abs() <= 2.0**-23 * summed_magnitude(qtype, weight.data)).all())
    torch.testing.assert_close(dequantize_rows(weight, ids, None), want[ids], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="row id out of range"):
        dequantize_rows(weight, torch.tensor([weight.out_features]), cpu_kernels)


def test_torch_fallback_is_the_reference():
    """Without the C++ kernels (no compiler), quant_linear is the reference itself, for any dtype of x."""
    weight, gen = _case("Q4_1", 0.02, seed=3)
    x = torch.randn(5, weight.in_features, generator=gen)
    torch.testing.assert_close(quant_linear(x, weight, None), x @ dequantize_ref(weight).T, rtol=1e-5, atol=1e-6)
    assert quant_linear(x.bfloat16(), weight, None).dtype == torch.bfloat16


def test_rejects_mismatched_inputs(cpu_kernels):
    weight, _ = _case("Q8_0", 0.02, seed=4)
    with pytest.raises(RuntimeError, match="x must be fp32"):
        cpu_kernels.quant_linear(torch.zeros(2, weight.in_features + 32), weight.data, 8, weight.out_features,
                                 weight.in_features)
    with pytest.raises(RuntimeError, match="weight must be contiguous uint8"):
        cpu_kernels.quant_linear(torch.zeros(2, weight.in_features), weight.data[:, :-2], 8, weight.out_features,
                                 weight.in_features)


def test_many_rows_path_in_tiles_matches_reference(cpu_kernels, many_rows_gemm):
    """A scratch buffer smaller than the weight: the GEMM path dequantizes it a few rows at a time (with the GEMM
    off, the int8 dots ignore the scratch)."""
    weight, gen = _case("Q6_K", 0.05, seed=11, num_out=37, num_blocks=2)
    x = torch.randn(GEMM_MIN_ROWS + 3, weight.in_features, generator=gen)
    seen = x if many_rows_gemm is not None else quantize_activations_ref(x)
    want = seen.double() @ dequantize_ref(weight).double().T
    for scratch_rows in (1, 5, 36, 37):
        got = quant_linear(x, weight, cpu_kernels, torch.empty(scratch_rows * weight.in_features))
        magnitude = dequantize_ref(weight).double().abs()
        bound = 1e-5 * (seen.double().abs() @ magnitude.T) + gemm_rounding(x, magnitude)
        assert bool(((got.double() - want).abs() <= bound).all()), scratch_rows


# Row counts that reach every grouping of the int8 kernels: the row-by-row loop's 4 + 1..3, the tiled kernel's
# minimum (16) and one below, its passes of 5 rows and the 1..4 rows left, a partial tile of weight rows
# (19 = 2 * 8 + 3); 517: the K-quant tiles (from 512 rows, 3 rows a pass), chunks of rows and a partial last one.
INVARIANCE_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 63, 64, 65, 200, 517)


@pytest.mark.parametrize("num_blocks", [2, 16])  # 16: the K-quant tiles' chunks of 64 rows start elsewhere in each part
@pytest.mark.parametrize("qtype", list(BLOCK_LAYOUTS))
def test_int8_dots_are_batch_invariant(cpu_kernels, qtype, num_blocks, monkeypatch):
    """With the GEMM off, a row's output is the same bits whatever rows share its call (a prompt's tail after a
    cache hit equals the same rows computed with the whole prompt), for every grouping the kernel makes."""
    monkeypatch.setenv("LLMCHAT_QUANT_GEMM", "off")
    gemm_dtype.cache_clear()
    try:
        seed = zlib.crc32(f"invariant {qtype} {num_blocks}".encode())
        weight, gen = _case(qtype, 0.05, seed=seed, num_out=19, num_blocks=num_blocks)
        x = _activations(max(INVARIANCE_ROWS), weight.in_features, gen)
        whole = quant_linear(x, weight, cpu_kernels)
        for num_rows in INVARIANCE_ROWS:
            for start in {0, 3, max(INVARIANCE_ROWS) - num_rows}:
                part = quant_linear(x[start : start + num_rows], weight, cpu_kernels)
                assert torch.equal(part, whole[start : start + num_rows]), (start, num_rows)
    finally:
        gemm_dtype.cache_clear()


# (weight scale, blocks per row): 2 blocks; 16 blocks, where the K-quant tiles split 517 rows into chunks of 64
TILE_CASES = ((0.05, 2), (65504.0, 16), (1e-6, 16))


@pytest.mark.parametrize("scale,num_blocks", TILE_CASES)
@pytest.mark.parametrize("qtype", list(BLOCK_LAYOUTS))
def test_tiled_int8_dots_equal_the_row_by_row_loop(cpu_kernels, qtype, scale, num_blocks):
    """The tiled kernels (AVX-512 builds: 8 weight rows unpacked once for all rows; for Q4_K / Q6_K 4 weight rows
    per chunk of activation rows that fits L2) give the same bits as the row-by-row loop they replace
    (`tiles=False`), at every row count, with a partial last tile (37 = 4 * 8 + 5 = 9 * 4 + 1), a partial last
    chunk of rows and extreme scales; builds without tiles run the loop both ways."""
    seed = zlib.crc32(f"tiles {qtype} {scale} {num_blocks}".encode())
    weight, gen = _case(qtype, scale, seed=seed, num_out=37, num_blocks=num_blocks)
    x = _activations(max(INVARIANCE_ROWS), weight.in_features, gen)
    args = (weight.data, qtype_number(qtype), weight.out_features, weight.in_features)
    for num_rows in INVARIANCE_ROWS + (512, 513, 514):  # K-quant tiles from 512 rows (csrc/quant_ktiles_avx512.h)
        tiled = cpu_kernels.quant_linear(x[:num_rows], *args)
        assert bool(tiled.isfinite().all()), num_rows  # NaN would fail torch.equal; inf would pass it unseen
        assert torch.equal(tiled, cpu_kernels.quant_linear(x[:num_rows], *args, tiles=False)), num_rows


def test_unknown_gemm_mode_names_the_choices(monkeypatch):
    monkeypatch.setenv("LLMCHAT_QUANT_GEMM", "fast")
    gemm_dtype.cache_clear()
    try:
        with pytest.raises(ValueError, match="LLMCHAT_QUANT_GEMM='fast': use one of float32, bfloat16, off"):
            gemm_dtype()
    finally:
        gemm_dtype.cache_clear()
