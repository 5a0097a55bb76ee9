"""The CPU linear paths against the plain fp64 matmul, on fresh random inputs of every batch size the engine uses."""
import pytest
import torch

from llmchat.kernels.linear import can_prepack, linear, linear_ref, prepack_linear_weight


NUM_ROWS = (1, 2, 3, 4, 5, 7, 8, 9, 33, 130)  # a decode row, batches of chats, verify steps, prefill chunks


def packed_outputs(weight: torch.Tensor, bias: torch.Tensor | None, why_not: str):
    """(x, linear(x) through the packed weight) for fresh random x of every row count the engine feeds; the
    packed path keeps no plain weight. Skips the test where `weight` is not packed on this machine."""
    if not can_prepack(weight):
        pytest.skip(why_not)
    packed = prepack_linear_weight(weight)
    assert packed is not None
    out_features, in_features = weight.shape
    for num_rows in NUM_ROWS:
        x = torch.randn(num_rows, in_features)
        got = linear(x, None, bias, packed)
        assert got.dtype == torch.float32 and got.shape == (num_rows, out_features)
        yield x, got


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(96, 64), (200, 48), (64, 130)])
def test_packed_bf16_linear_matches_reference(shape, bias):
    """bf16 weights, fp32 activations: the packed oneDNN path equals the reference on the same bf16-rounded
    operands, up to the bf16 rounding of its output."""
    out_features, in_features = shape
    weight = torch.randn(out_features, in_features).bfloat16()
    b = torch.randn(out_features) if bias else None
    for x, got in packed_outputs(weight, b, "no native bf16 matmul on this CPU (AMX / AVX-512 BF16)"):
        xb = x.bfloat16().double()  # the operands the kernel sees
        product = linear_ref(xb, weight.double())  # rounded to bf16 by the kernel, before the bias is added
        expected = product + (0 if b is None else b.double())
        err = (got.double() - expected).abs()
        bound = 2**-8 * product.abs() + 2**-16 * (xb.abs() @ weight.double().abs().T) + 1e-6
        assert bool((err <= bound).all()), err.max()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(96, 64), (200, 48), (64, 130), (40, 1536)])
def test_packed_fp32_linear_matches_reference(shape, bias, monkeypatch):
    """fp32 weights keep only the oneDNN-packed copy: every batch size the engine feeds equals the fp64
    product within fp32's summation error."""
    monkeypatch.delenv("LLMCHAT_FP32_LINEAR", raising=False)
    out_features, in_features = shape
    weight = torch.randn(out_features, in_features)
    b = torch.randn(out_features) if bias else None
    for x, got in packed_outputs(weight, b, "this torch has no oneDNN linear"):
        expected = linear_ref(x.double(), weight.double(), None if b is None else b.double())
        magnitude = x.double().abs() @ weight.double().abs().T + (0 if b is None else b.double().abs())
        bound = (in_features + 2) * 2**-24 * magnitude + 1e-30
        assert bool(((got.double() - expected).abs() <= bound).all())


def test_plain_fp32_path_when_asked_and_a_bad_choice_is_one_line(monkeypatch):
    weight, x = torch.randn(10, 6), torch.randn(3, 6)
    monkeypatch.setenv("LLMCHAT_FP32_LINEAR", "plain")
    assert prepack_linear_weight(weight) is None  # F.linear on the plain weight
    torch.testing.assert_close(linear(x, weight, None, None), linear_ref(x, weight))
    monkeypatch.setenv("LLMCHAT_FP32_LINEAR", "fast")
    with pytest.raises(ValueError, match="use 'packed' or 'plain'"):
        prepack_linear_weight(weight)
    monkeypatch.delenv("LLMCHAT_FP32_LINEAR")
    assert prepack_linear_weight(weight.half()) is None  # fp16 is never packed


def test_unpacked_bf16_weight_computes_in_bf16_and_returns_activation_dtype():
    weight, x = torch.randn(10, 6).bfloat16(), torch.randn(3, 6)
    got = linear(x, weight, None, None)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, linear_ref(x.bfloat16().float(), weight.float()), rtol=1e-2, atol=1e-2)
