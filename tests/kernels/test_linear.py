"""The prepacked CPU linear against the plain matmul, on fresh random inputs of every batch size the engine uses."""
import pytest
import torch

from llmchat.kernels.linear import can_prepack, linear, linear_ref, prepack_linear_weight


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(96, 64), (200, 48), (64, 130)])
def test_packed_linear_matches_reference(shape, bias):
    out_features, in_features = shape
    weight = torch.randn(out_features, in_features)
    b = torch.randn(out_features) if bias else None
    packed = prepack_linear_weight(weight)
    if not can_prepack(weight):
        pytest.skip("oneDNN prepacking is not available in this torch build")
    for num_rows in (1, 2, 3, 4, 7, 8, 9, 33, 130):
        x = torch.randn(num_rows, in_features)
        got = linear(x, weight, b, packed)
        expected = linear_ref(x.double(), weight.double(), None if b is None else b.double()).float()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_unpacked_falls_back_to_plain_linear():
    weight, x = torch.randn(10, 6), torch.randn(3, 6)
    torch.testing.assert_close(linear(x, weight, None, None), linear_ref(x, weight))
    assert prepack_linear_weight(weight.half()) is None  # only fp32 CPU weights are packed
