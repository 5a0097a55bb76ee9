"""RoPE tables: one fp32 `[max_positions, rotary_dim]` cos|sin table per kind of layer, with the scaling the
config names (Hugging Face's rope types, and llama.cpp's per-frequency factors from a GGUF's `rope_freqs`).

Row p is cat(cos(p * inv_freq), sin(p * inv_freq)) * attention_factor; the rotation itself is the kernel's
(kernels/rope.py). Scalings that Hugging Face recomputes as the sequence grows past the original context
(`dynamic`, `longrope`) are written per row here, so a cached key never changes: within the original context
they equal Hugging Face exactly; beyond it, row p uses the frequencies for a context of p + 1 tokens.
"""
from __future__ import annotations

import math

import torch

from ..config import FULL_ATTENTION, SLIDING_ATTENTION, ModelConfig


def default_inv_freq(dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))  # [dim // 2]


def llama3_inv_freq(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    """Llama 3.1: long wavelengths slowed by `factor`, short ones kept, a smooth ramp between."""
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    slowed = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * slowed / factor + smooth * slowed
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, blended, slowed)


def yarn_inv_freq(dim: int, base: float, s: dict, max_positions: int) -> tuple[torch.Tensor, float]:
    """YaRN: interpolate the low frequencies by `factor`, keep the high ones, ramp between; scale attention."""
    factor = s.get("factor") or max_positions / s["original_max_position_embeddings"]
    original = s.get("original_max_position_embeddings") or max_positions

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        m, m_all = s.get("mscale"), s.get("mscale_all_dim")
        attention_factor = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(s.get("beta_fast") or 32), correction_dim(s.get("beta_slow") or 1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation = 1 - ramp  # 1: keep the frequency, 0: interpolate it
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attention_factor)


def _table(freqs: torch.Tensor, attention_factor: float = 1.0) -> torch.Tensor:
    """freqs `[max_positions, dim // 2]` (angle per position and pair) -> cos|sin `[max_positions, dim]`."""
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1) * attention_factor


def rope_table(dim: int, max_positions: int, base: float, scaling: dict | None,
               config_max_positions: int) -> torch.Tensor:
    """The cos|sin table `[max_positions, dim]` (fp32) for `dim` rotary dims at RoPE base `base`."""
    positions = torch.arange(max_positions, dtype=torch.int64).float()  # [max_positions]
    kind = (scaling or {}).get("rope_type", "default")
    s = scaling or {}
    inv_freq = default_inv_freq(dim, base)
    attention_factor = 1.0
    if kind == "linear":
        inv_freq = inv_freq / s["factor"]
    elif kind == "llama3":
        inv_freq = llama3_inv_freq(inv_freq, s)
    elif kind == "proportional":  # Gemma 4: the first fraction of the pairs turn, the rest keep frequency 0
        num_turned = int(s["partial_rotary_factor"] * dim // 2)
        inv_freq = torch.cat([inv_freq[:num_turned], torch.zeros(dim // 2 - num_turned)]) / s.get("factor", 1.0)
    elif kind == "freq_factors":  # llama.cpp: theta_i = p * base^(-2i/d) / factor_i (GGUF rope_freqs)
        inv_freq = inv_freq / torch.tensor(s["factors"], dtype=torch.float32)
    elif kind == "yarn":
        inv_freq, attention_factor = yarn_inv_freq(dim, base, s, config_max_positions)
    elif kind == "dynamic":  # NTK: past the original context, row p stretches the base for p + 1 tokens
        factor, original = s["factor"], config_max_positions
        lengths = torch.clamp(positions + 1, min=original)[:, None]  # [max_positions, 1]
        bases = base * ((factor * lengths / original) - (factor - 1)) ** (dim / (dim - 2))
        exponents = torch.arange(0, dim, 2, dtype=torch.int64).float()[None, :] / dim
        return _table(positions[:, None] * (1.0 / bases**exponents))
    elif kind == "longrope":  # Phi-3: short factors within the original context, long ones past it
        original = s["original_max_position_embeddings"]
        factor = s.get("factor") or config_max_positions / original
        attention_factor = s.get("attention_factor") or (
            1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original)))
        shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        short = 1.0 / (torch.tensor(s["short_factor"], dtype=torch.float32) * base**shape)
        long = 1.0 / (torch.tensor(s["long_factor"], dtype=torch.float32) * base**shape)
        inv = torch.where((positions >= original)[:, None], long[None, :], short[None, :])  # [max_positions, half]
        return _table(positions[:, None] * inv, attention_factor)
    elif kind != "default":
        raise ValueError(f"RoPE scaling type {kind!r} is not supported")
    return _table(torch.outer(positions, inv_freq), attention_factor)


def rope_tables(cfg: ModelConfig, max_positions: int | None = None) -> dict[str, torch.Tensor]:
    """Per layer type, the cos|sin table its layers use: sliding layers have their own base where the config
    gives one (Gemma 3: local base, unscaled), and their own head size where it differs (Gemma 4); every other
    RoPE layer the model's base and scaling."""
    n = max_positions or cfg.max_position_embeddings
    dims = {kind: cfg.rotary_dim_of(cfg.layer_types.index(kind)) if kind in cfg.layer_types else cfg.rotary_dim
            for kind in (FULL_ATTENTION, SLIDING_ATTENTION)}
    full = rope_table(dims[FULL_ATTENTION], n, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings)
    tables = {FULL_ATTENTION: full, SLIDING_ATTENTION: full}
    if cfg.rope_local_theta is not None:
        tables[SLIDING_ATTENTION] = rope_table(dims[SLIDING_ATTENTION], n, cfg.rope_local_theta, None,
                                               cfg.max_position_embeddings)
    elif dims[SLIDING_ATTENTION] != dims[FULL_ATTENTION]:
        tables[SLIDING_ATTENTION] = rope_table(dims[SLIDING_ATTENTION], n, cfg.rope_theta, cfg.rope_scaling,
                                               cfg.max_position_embeddings)
    return tables
