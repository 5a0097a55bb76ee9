"""What the block pool evicted, and when: a bounded record of chain hashes, so a later miss can say
"your blocks were evicted 12 s ago" instead of just "not cached"."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from ..api.metrics import now


class EvictionLog:
    """The most recent `capacity` evictions: block hash -> time of eviction (perf_counter clock)."""

    def __init__(self, capacity: int) -> None:
        assert capacity > 0
        self.capacity = capacity
        self._evicted_at: OrderedDict[bytes, float] = OrderedDict()

    def record(self, block_hash: bytes | None, t: float | None = None) -> None:
        if block_hash is None:
            return
        self._evicted_at[block_hash] = now() if t is None else t
        self._evicted_at.move_to_end(block_hash)
        while len(self._evicted_at) > self.capacity:
            self._evicted_at.popitem(last=False)

    def evicted_at(self, block_hash: bytes) -> float | None:
        return self._evicted_at.get(block_hash)

    def times(self, hashes: Iterable[bytes]) -> list[float]:
        """When each of these blocks was evicted, for those the log remembers."""
        return [t for h in hashes if (t := self._evicted_at.get(h)) is not None]

    def __len__(self) -> int:
        return len(self._evicted_at)
