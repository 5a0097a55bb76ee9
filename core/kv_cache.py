"""The paged K/V tensors: per layer `[num_blocks, block_size, num_kv_heads, head_dim]`, sized from a byte budget."""
from __future__ import annotations

import torch

from llmchat.core.config import ModelConfig

DEFAULT_KV_BYTES_CPU = 1 << 30  # 1 GiB: ~23k tokens of SmolLM2-135M in fp32
DEFAULT_KV_BYTES_CUDA = 8 << 30


def default_kv_cache_bytes(device: str) -> int:
    return DEFAULT_KV_BYTES_CUDA if device.startswith("cuda") else DEFAULT_KV_BYTES_CPU


class PagedKVCache:
    def __init__(self, cfg: ModelConfig, block_size: int, kv_cache_bytes: int, dtype: torch.dtype, device: str):
        element_size = torch.empty((), dtype=dtype).element_size()
        self.bytes_per_token = cfg.kv_bytes_per_token(element_size)
        self.bytes_per_block = self.bytes_per_token * block_size
        self.num_blocks = kv_cache_bytes // self.bytes_per_block
        if self.num_blocks < 1:
            raise ValueError(
                f"a KV budget of {kv_cache_bytes} bytes holds no block ({self.bytes_per_block} bytes per "
                f"{block_size}-token block); raise --kv-cache-gb"
            )
        self.block_size = block_size
        shape = (self.num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim)
        # torch.empty, not zeros: the budget is a ceiling, pages become resident only when written. Stale
        # slots may hold anything (NaN included); every attention path masks by context length and zeroes
        # what it gathers past it, so garbage never reaches an output (tests poison the cache with NaN).
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
