"""Random GGUF blocks for the quantized-kernel tests: random quant bytes with chosen, finite fp16 scales."""
from __future__ import annotations

import numpy as np
import torch

from llmchat.kernels.quant_blocks import BLOCK_LAYOUTS

# byte offsets of each type's fp16 fields (d, m / dmin)
F16_FIELDS = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2),
              "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "Q2_K": (80, 82), "Q3_K": (108,)}


def random_blocks(qtype: str, num_rows: int, num_cols: int, gen: torch.Generator, scale: float = 0.02) -> torch.Tensor:
    """uint8 [num_rows, row_bytes]: random bytes, every fp16 field a random finite value of size ~`scale`
    (scale=0 gives zero scales; a huge scale gives fp16's largest values)."""
    block_weights, block_bytes = BLOCK_LAYOUTS[qtype]
    num_blocks = num_rows * (num_cols // block_weights)
    data = torch.randint(0, 256, (num_blocks, block_bytes), generator=gen, dtype=torch.uint8)
    for at in F16_FIELDS[qtype]:
        values = (torch.rand(num_blocks, 1, generator=gen) * 2 - 1) * scale
        values = values.clamp(-65504, 65504).half()
        data[:, at : at + 2] = values.view(torch.uint8)
    return data.reshape(num_rows, -1)


def gguf_dequantize(qtype: str, data: torch.Tensor) -> torch.Tensor:
    """The `gguf` package's dequantization of the same bytes, as fp32 torch."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    out = dequantize(data.numpy(), GGMLQuantizationType[qtype])
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


# byte ranges of the quant bits (qs, qh) of the types the fast path computes as scale * u + offset (u unsigned)
OFFSET_QUANT_BYTES = {"Q4_0": (2, 18), "Q4_1": (4, 20), "Q5_0": (2, 22), "Q5_1": (4, 24),
                      "Q4_K": (16, 144), "Q5_K": (16, 176), "Q2_K": (16, 80)}


def summed_magnitude(qtype: str, data: torch.Tensor) -> torch.Tensor:
    """fp64 [out_features, in_features]: the size of the terms the fast path adds for each weight, |w| + 2|offset|
    (it sums scale * u and the offset separately, |scale * u| <= |w| + |offset|); |w| for Q8_0, Q6_K and Q3_K."""
    from llmchat.kernels.quant_blocks import BLOCK_LAYOUTS, dequantize_blocks_ref

    magnitude = dequantize_blocks_ref(qtype, data).double().abs()
    if qtype in OFFSET_QUANT_BYTES:
        start, end = OFFSET_QUANT_BYTES[qtype]
        blocks = data.reshape(-1, BLOCK_LAYOUTS[qtype][1]).clone()
        blocks[:, start:end] = 0  # every weight becomes its group's offset
        magnitude += 2 * dequantize_blocks_ref(qtype, blocks.reshape(data.shape)).double().abs()
    return magnitude
