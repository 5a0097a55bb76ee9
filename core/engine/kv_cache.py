"""The paged K/V tensors: per layer `[num_blocks, block_size, num_kv_heads, head_dim]`, sized from a byte budget."""
from __future__ import annotations

import torch

from ..config import ModelConfig

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

    @property
    def block_shape(self) -> tuple[int, ...]:
        """One block's K and V across all layers: [num_layers, 2, block_size, num_kv_heads, head_dim]."""
        return (len(self.k), 2, *self.k[0].shape[1:])

    def read_blocks(self, block_ids: list[int]) -> torch.Tensor:
        """A CPU copy of these blocks' K and V: [len(block_ids), num_layers, 2, block_size, num_kv_heads, head_dim]."""
        index = torch.tensor(block_ids, dtype=torch.int64, device=self.k[0].device)
        out = torch.empty((len(block_ids), *self.block_shape), dtype=self.k[0].dtype)
        for layer, (k, v) in enumerate(zip(self.k, self.v)):
            out[:, layer, 0] = k.index_select(0, index).cpu()
            out[:, layer, 1] = v.index_select(0, index).cpu()
        return out

    def write_block(self, block_id: int, data: torch.Tensor) -> None:
        """Fill one block from `data` [num_layers, 2, block_size, num_kv_heads, head_dim] (as read_blocks gives)."""
        assert tuple(data.shape) == self.block_shape, (tuple(data.shape), self.block_shape)
        data = data.to(self.k[0].device)
        for layer, (k, v) in enumerate(zip(self.k, self.v)):
            k[block_id].copy_(data[layer, 0])
            v[block_id].copy_(data[layer, 1])
