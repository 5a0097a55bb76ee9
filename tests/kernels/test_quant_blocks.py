"""The torch dequantization of every GGUF block type equals the `gguf` package's, on fresh random blocks."""
import zlib

import pytest
import torch

from llmchat.kernels.quant_blocks import BLOCK_LAYOUTS, QuantWeight, dequantize_ref
from quant_testing import gguf_dequantize, random_blocks


@pytest.mark.parametrize("scale", [0.0, 1e-6, 0.05, 3.0, 65504.0])
@pytest.mark.parametrize("qtype", list(BLOCK_LAYOUTS))
def test_dequantize_matches_gguf(qtype, scale):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{qtype} {scale}".encode()))
    block_weights, _ = BLOCK_LAYOUTS[qtype]
    num_cols = block_weights * 3
    data = random_blocks(qtype, 5, num_cols, gen, scale=scale)
    got = dequantize_ref(QuantWeight(qtype, data, 5, num_cols))
    want = gguf_dequantize(qtype, data)
    assert got.shape == want.shape == (5, num_cols)
    assert torch.isfinite(want).all()
    # both compute in fp32; they may round d * sc * q in a different order (one ulp)
    torch.testing.assert_close(got, want, rtol=2e-7, atol=0)


def test_quant_weight_rejects_wrong_shapes():
    with pytest.raises(ValueError, match="whole blocks of 256"):
        QuantWeight("Q4_K", torch.zeros(2, 144, dtype=torch.uint8), 2, 128)
    with pytest.raises(ValueError, match="needs uint8 data of shape"):
        QuantWeight("Q8_0", torch.zeros(2, 33, dtype=torch.uint8), 2, 32)
    with pytest.raises(ValueError, match="unsupported block type"):
        QuantWeight("Q9_9", torch.zeros(2, 34, dtype=torch.uint8), 2, 32)
