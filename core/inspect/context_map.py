"""Where each block of a chat's context is now (issue 27 item 6): in the paged cache, only in the disk tier, or
gone (its next turn computes it again). Read on the engine thread (EngineService.block_tiers); the context map
screen (tui/text/context_map_text.py) lays it out per message.
"""
from __future__ import annotations

from typing import Any

from ..engine.block_manager import hash_block

MEMORY, DISK, GONE = "memory", "disk", "gone"


def block_tiers(engine: Any, token_ids: list[int]) -> list[str]:
    """Per full block of `token_ids` (the chat's ids), MEMORY, DISK or GONE."""
    manager, disk = engine.block_manager, engine.kv_disk
    size = manager.block_size
    tiers: list[str] = []
    parent: bytes | None = None
    for i in range(len(token_ids) // size):
        h = hash_block(parent, token_ids[i * size:(i + 1) * size], manager.fingerprint)
        block_id = manager.hash_to_block.get(h)
        if block_id is not None and manager.blocks[block_id].parent_hash == parent:
            tiers.append(MEMORY)
        elif disk is not None and disk.count_on_disk([h]):
            tiers.append(DISK)
        else:
            tiers.append(GONE)
        parent = h
    return tiers
