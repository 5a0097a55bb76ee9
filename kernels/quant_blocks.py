"""GGUF block types as stored, and their dequantization in plain torch (the reference every quantized kernel
is checked against; itself checked against the `gguf` package's `gguf.quants.dequantize`).

A quantized weight `[out_features, in_features]` is kept as the file holds it: uint8 `[out_features,
row_bytes]`, each row a run of blocks (32 weights for the legacy types, 256 for the K-quants). Layouts, as in
ggml's `ggml-common.h` (little-endian; `d`, `m`, `dmin` are fp16):

  Q8_0  34 B: d, int8 qs[32]                                   w = d * q
  Q4_0  18 B: d, qs[16] (weight j: low nibble, j+16: high)     w = d * (q - 8)
  Q4_1  20 B: d, m, qs[16]                                     w = d * q + m
  Q5_0  22 B: d, qh[4] (bit i: 5th bit of weight i), qs[16]   w = d * (q - 16)
  Q5_1  24 B: d, m, qh[4], qs[16]                              w = d * q + m
  Q4_K 144 B: d, dmin, scales[12] (8 x 6-bit scale and min), qs[128]; sub-block s of 32 takes the low
              (s even) or high (s odd) nibbles of qs[32 * (s // 2):][:32]   w = d * sc_s * q - dmin * m_s
  Q5_K 176 B: as Q4_K with qh[32] before qs: bit s of qh[l] is the 5th bit of weight l of sub-block s
  Q6_K 210 B: ql[128], qh[64], int8 scales[16] (one per 16 weights), d      w = d * sc * (q - 32)
  Q2_K  84 B: scales[16] (low nibble: scale, high: min, one per 16 weights), qs[64], d, dmin;
              sub-block s of 32 (s = 4h + j) takes bits 2j..2j+1 of qs[32 h:][:32]   w = d * sc * q - dmin * m
  Q3_K 110 B: hmask[32], qs[64], scales[12] (sixteen 6-bit values), d; weight l of sub-block s (s = 4h + j):
              q = bits 2j..2j+1 of qs[32 h + l], minus 4 where bit s of hmask[l] is clear   w = d * (sc - 32) * q
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# name -> (weights per block, bytes per block)
BLOCK_LAYOUTS: dict[str, tuple[int, int]] = {
    "Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
    "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210), "Q2_K": (256, 84), "Q3_K": (256, 110),
}


@dataclass(slots=True)
class QuantWeight:
    """A linear's weight in its file's block format: `data` uint8 [out_features, row_bytes]."""

    qtype: str
    data: torch.Tensor
    out_features: int
    in_features: int

    def __post_init__(self) -> None:
        if self.qtype not in BLOCK_LAYOUTS:
            raise ValueError(f"unsupported block type {self.qtype!r}: one of {', '.join(BLOCK_LAYOUTS)}")
        block_weights, block_bytes = BLOCK_LAYOUTS[self.qtype]
        if self.in_features % block_weights:
            raise ValueError(f"{self.qtype} rows hold whole blocks of {block_weights}; got {self.in_features} columns")
        expected = (self.out_features, self.in_features // block_weights * block_bytes)
        if self.data.dtype != torch.uint8 or tuple(self.data.shape) != expected:
            raise ValueError(f"{self.qtype} weight {self.out_features}x{self.in_features} needs uint8 data of shape "
                             f"{expected}, got {self.data.dtype} {tuple(self.data.shape)}")

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


def _f16(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The fp16 field at byte `at` of each block, as fp32 `[num_blocks, 1]`."""
    return blocks[:, at : at + 2].contiguous().view(torch.float16).float()


def _nibbles16(qs: torch.Tensor) -> torch.Tensor:
    """qs uint8 [n, 16] -> [n, 32] int: low nibbles (weights 0..15), then high nibbles (16..31)."""
    q = qs.int()
    return torch.cat([q & 15, q >> 4], dim=1)


def _bits32(qh: torch.Tensor) -> torch.Tensor:
    """qh uint8 [n, 4] -> [n, 32] int: bit i of the little-endian 32-bit word."""
    bits = (qh.int().unsqueeze(-1) >> torch.arange(8, device=qh.device)) & 1  # [n, 4, 8]
    return bits.reshape(qh.shape[0], 32)


def _k_scales(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K: 12 bytes -> eight 6-bit scales and eight 6-bit mins, each int [n, 8]."""
    q = scales.int()
    sc = torch.cat([q[:, 0:4] & 63, (q[:, 8:12] & 15) | ((q[:, 0:4] >> 6) << 4)], dim=1)
    mn = torch.cat([q[:, 4:8] & 63, (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)], dim=1)
    return sc, mn


def _dequant_q8_0(b: torch.Tensor) -> torch.Tensor:
    return _f16(b, 0) * b[:, 2:34].contiguous().view(torch.int8).float()


def _dequant_q4_0(b: torch.Tensor) -> torch.Tensor:
    return _f16(b, 0) * (_nibbles16(b[:, 2:18]) - 8).float()


def _dequant_q4_1(b: torch.Tensor) -> torch.Tensor:
    return _f16(b, 0) * _nibbles16(b[:, 4:20]).float() + _f16(b, 2)


def _dequant_q5_0(b: torch.Tensor) -> torch.Tensor:
    q = _nibbles16(b[:, 6:22]) | (_bits32(b[:, 2:6]) << 4)
    return _f16(b, 0) * (q - 16).float()


def _dequant_q5_1(b: torch.Tensor) -> torch.Tensor:
    q = _nibbles16(b[:, 8:24]) | (_bits32(b[:, 4:8]) << 4)
    return _f16(b, 0) * q.float() + _f16(b, 2)


def _k_nibbles(qs: torch.Tensor) -> torch.Tensor:
    """qs uint8 [n, 128] -> [n, 8, 32] int: sub-block s = low (s even) / high (s odd) nibbles of chunk s // 2."""
    q = qs.int().reshape(-1, 4, 1, 32)
    return torch.cat([q & 15, q >> 4], dim=2).reshape(-1, 8, 32)


def _dequant_q4_k(b: torch.Tensor) -> torch.Tensor:
    sc, mn = _k_scales(b[:, 4:16])
    q = _k_nibbles(b[:, 16:144])
    w = _f16(b, 0).unsqueeze(-1) * sc.unsqueeze(-1) * q - _f16(b, 2).unsqueeze(-1) * mn.unsqueeze(-1)
    return w.reshape(-1, 256)


def _dequant_q5_k(b: torch.Tensor) -> torch.Tensor:
    sc, mn = _k_scales(b[:, 4:16])
    high = (b[:, 16:48].int().unsqueeze(1) >> torch.arange(8, device=b.device).view(1, 8, 1)) & 1  # [n, 8, 32]
    q = _k_nibbles(b[:, 48:176]) | (high << 4)
    w = _f16(b, 0).unsqueeze(-1) * sc.unsqueeze(-1) * q - _f16(b, 2).unsqueeze(-1) * mn.unsqueeze(-1)
    return w.reshape(-1, 256)


def _dequant_q6_k(b: torch.Tensor) -> torch.Tensor:
    ql = b[:, 0:128].int().reshape(-1, 2, 1, 2, 32)  # [n, half, _, ql chunk, l]
    qh = b[:, 128:192].int().reshape(-1, 2, 1, 32)  # [n, half, _, l]
    low = torch.cat([ql & 15, ql >> 4], dim=2).reshape(-1, 2, 4, 32)  # groups g = 2 * nibble + chunk
    high = (qh >> (2 * torch.arange(4, device=qh.device).view(1, 1, 4, 1))) & 3  # [n, half, g, l]
    q = (low | (high << 4)) - 32
    scales = b[:, 192:208].contiguous().view(torch.int8).float().repeat_interleave(16, dim=1)  # [n, 256]
    return _f16(b, 208) * scales * q.reshape(-1, 256).float()


def _crumbs(qs: torch.Tensor) -> torch.Tensor:
    """qs uint8 [n, 64] -> [n, 8, 32] int: sub-block 4h + j = bits 2j..2j+1 of qs[32 h:][:32] (Q2_K, Q3_K)."""
    q = qs.int().reshape(-1, 2, 1, 32)
    return ((q >> (2 * torch.arange(4, device=qs.device).view(1, 1, 4, 1))) & 3).reshape(-1, 8, 32)


def _dequant_q2_k(b: torch.Tensor) -> torch.Tensor:
    sc = b[:, 0:16].int()
    q = _crumbs(b[:, 16:80]).reshape(-1, 16, 16).float()  # [n, 16 groups of 16]
    d, dmin = _f16(b, 80), _f16(b, 82)
    w = (d * (sc & 15).float()).unsqueeze(-1) * q - (dmin * (sc >> 4).float()).unsqueeze(-1)
    return w.reshape(-1, 256)


def _q3_k_scales(scales: torch.Tensor) -> torch.Tensor:
    """Q3_K: 12 bytes -> sixteen 6-bit scales minus 32, int [n, 16]: low 4 bits from bytes 0..7 (low nibbles for
    0..7, high for 8..15), the top 2 bits of scale s at bits 2 (s // 4) of byte 8 + s % 4."""
    q = scales.int()
    low = torch.cat([q[:, 0:8] & 15, q[:, 0:8] >> 4], dim=1)
    s = torch.arange(16, device=scales.device)
    high = (q[:, 8 + s % 4] >> (2 * (s // 4))) & 3
    return (low | (high << 4)) - 32


def _dequant_q3_k(b: torch.Tensor) -> torch.Tensor:
    high = (b[:, 0:32].int().unsqueeze(1) >> torch.arange(8, device=b.device).view(1, 8, 1)) & 1  # [n, 8, 32]
    q = (_crumbs(b[:, 32:96]) - 4 * (1 - high)).reshape(-1, 16, 16).float()
    dl = _f16(b, 108) * _q3_k_scales(b[:, 96:108]).float()  # [n, 16]
    return (dl.unsqueeze(-1) * q).reshape(-1, 256)


_DEQUANT = {
    "Q8_0": _dequant_q8_0, "Q4_0": _dequant_q4_0, "Q4_1": _dequant_q4_1, "Q5_0": _dequant_q5_0,
    "Q5_1": _dequant_q5_1, "Q4_K": _dequant_q4_k, "Q5_K": _dequant_q5_k, "Q6_K": _dequant_q6_k,
    "Q2_K": _dequant_q2_k, "Q3_K": _dequant_q3_k,
}


def dequantize_blocks_ref(qtype: str, data: torch.Tensor) -> torch.Tensor:
    """uint8 `[..., row_bytes]` of `qtype` blocks -> fp32 `[..., row_bytes / block_bytes * block_weights]`."""
    block_weights, block_bytes = BLOCK_LAYOUTS[qtype]
    assert data.dtype == torch.uint8 and data.shape[-1] % block_bytes == 0, (qtype, data.dtype, data.shape)
    blocks = data.reshape(-1, block_bytes)
    out = _DEQUANT[qtype](blocks)  # [num_blocks, block_weights]
    return out.reshape(*data.shape[:-1], data.shape[-1] // block_bytes * block_weights)


def dequantize_ref(weight: QuantWeight) -> torch.Tensor:
    """The weight as fp32 `[out_features, in_features]`."""
    return dequantize_blocks_ref(weight.qtype, weight.data)
