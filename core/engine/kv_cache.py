"""The paged K/V tensors: per layer `[num_blocks, block_size, num_kv_heads, head_dim]`, sized from a byte budget.

A layer that reads another layer's K/V (Gemma 4's KV-shared layers) has none (None); layers may differ in head
size (Gemma 4), and then a block's K/V across layers is one flat run of values."""
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
        shapes = [(self.num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim_of(i))
                  if cfg.kv_source_of(i) == i else None for i in range(cfg.num_hidden_layers)]
        # torch.empty, not zeros: the budget is a ceiling, pages become resident only when written. Stale
        # slots may hold anything (NaN included); every attention path masks by context length and zeroes
        # what it gathers past it, so garbage never reaches an output (tests poison the cache with NaN).
        self.k = [torch.empty(s, dtype=dtype, device=device) if s else None for s in shapes]
        self.v = [torch.empty(s, dtype=dtype, device=device) if s else None for s in shapes]
        self.stored = [(k, v) for k, v in zip(self.k, self.v) if k is not None]  # the layers that hold K/V
        self.element_size = element_size

    @property
    def block_shape(self) -> tuple[int, ...]:
        """One block's K and V across the layers that hold them: [num_layers, 2, block_size, num_kv_heads,
        head_dim]; [values] when their head sizes differ."""
        shapes = {tuple(k.shape[1:]) for k, _ in self.stored}
        if len(shapes) == 1:
            return (len(self.stored), 2, *shapes.pop())
        return (self.bytes_per_block // self.element_size,)

    def _runs(self):
        """Per layer that holds K/V: (k, v, first value of its K in a block's flat run, values of its K)."""
        start = 0
        for k, v in self.stored:
            size = k[0].numel()
            yield k, v, start, size
            start += 2 * size

    def read_blocks(self, block_ids: list[int]) -> torch.Tensor:
        """A CPU copy of these blocks' K and V: [len(block_ids), *block_shape]."""
        index = torch.tensor(block_ids, dtype=torch.int64, device=self.k[0].device)
        out = torch.empty((len(block_ids), self.bytes_per_block // self.element_size), dtype=self.k[0].dtype)
        for k, v, start, size in self._runs():
            out[:, start : start + size] = k.index_select(0, index).flatten(1).cpu()
            out[:, start + size : start + 2 * size] = v.index_select(0, index).flatten(1).cpu()
        return out.view(len(block_ids), *self.block_shape)

    def write_block(self, block_id: int, data: torch.Tensor) -> None:
        """Fill one block from `data` [*block_shape] (as read_blocks gives)."""
        assert tuple(data.shape) == self.block_shape, (tuple(data.shape), self.block_shape)
        data = data.to(self.k[0].device).reshape(-1)
        for k, v, start, size in self._runs():
            k[block_id].copy_(data[start : start + size].view(k.shape[1:]))
            v[block_id].copy_(data[start + size : start + 2 * size].view(v.shape[1:]))
