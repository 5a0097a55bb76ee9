"""Per conversation, the block-hash chain of its last request: where each chat's prefix lives now (resident in
the paged cache, only in the disk tier, or gone), answered from the hashes the engine already made."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from ..api.metrics import PrefixTiers
from ..api.params import SamplingParams
from .block_manager import BlockManager
from .sequence import Sequence


class ConversationChains:
    MAX_REMEMBERED = 256  # conversations; the least recently answered are forgotten first

    def __init__(self, block_manager: BlockManager, disk: Callable[[], Any]) -> None:
        self.block_manager = block_manager
        self.disk = disk  # the engine's kvdisk.tier.KVDiskTier or None, read at each call (closing drops it)
        self.chains: OrderedDict[Hashable, list[bytes]] = OrderedDict()  # tag -> block hashes, oldest first
        self.pinned_tags: set[Hashable] = set()  # their chains stay pinned as they grow

    def pin(self, tag: Hashable, pinned: bool) -> tuple[int, int]:
        """Pin (or unpin) a conversation's chain in the block manager; (blocks pinned, blocks in its chain)."""
        chain = self.chains.get(tag, [])
        if not pinned:
            self.pinned_tags.discard(tag)
            self.block_manager.unpin(chain)
            return 0, len(chain)
        self.pinned_tags.add(tag)
        return self.block_manager.pin(chain), len(chain)

    def remember(self, tag: Hashable, chain: list[bytes]) -> None:
        if tag in self.pinned_tags:  # the chain moved on: pin the new one, release what it dropped
            self.block_manager.unpin(set(self.chains.get(tag, [])) - set(chain))
            self.block_manager.pin(chain)
        self.chains[tag] = list(chain)
        self.chains.move_to_end(tag)
        while len(self.chains) > self.MAX_REMEMBERED:
            self.chains.popitem(last=False)

    def adopt(self, tag: Hashable, token_ids: list[int]) -> None:
        """Remember the chain of a conversation the engine has not answered yet (a chat from before a restart)."""
        if tag in self.chains or not self.block_manager.enable_prefix_caching:
            return
        probe = Sequence(-1, list(token_ids), len(token_ids), SamplingParams())
        self.block_manager.update_block_hashes(probe)
        self.remember(tag, probe.block_hashes)

    def residency(self, in_flight: Iterable[tuple[Hashable, list[int]]]) -> dict[Hashable, tuple[int, ...]]:
        """Per tag: the blocks still holding its last request's cached prefix, plus the block tables of its
        requests in flight (`in_flight`: (tag, block table) pairs)."""
        blocks = {tag: set(self.block_manager.resident_chain(chain)) for tag, chain in self.chains.items()}
        for tag, block_table in in_flight:
            blocks.setdefault(tag, set()).update(block_table)
        return {tag: tuple(sorted(ids)) for tag, ids in blocks.items() if ids}

    def prefix_tiers(self) -> dict[Hashable, PrefixTiers]:
        """Per tag: how many full blocks its last request's prefix has, how many of them are resident in the
        paged cache, and how many more are only in the disk tier (the rest would be recomputed)."""
        disk, tiers = self.disk(), {}
        for tag, chain in self.chains.items():
            num_resident = len(self.block_manager.resident_chain(chain))
            num_disk = disk.count_on_disk(chain[num_resident:]) if disk is not None else 0
            tiers[tag] = PrefixTiers(len(chain), num_resident, num_disk)
        return tiers
