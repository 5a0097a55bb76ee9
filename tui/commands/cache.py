"""`llmchat cache`: what the prefix cache's disk tier holds, and `--clear` to empty it."""
from __future__ import annotations

import argparse

from ..text.format import nbytes


def run_cache(args: argparse.Namespace) -> int:
    from ...core.kvdisk.folder import default_kv_disk_dir
    from ...core.kvdisk.folder import clear_store, read_lifetime_counters, scan

    root = default_kv_disk_dir()
    if args.clear:
        num_entries, num_bytes = clear_store(root)
        print(f"removed {num_entries:,} KV blocks ({nbytes(num_bytes)}) from {root}")
        return 0
    index, _ = scan(root, clean_temp=False)
    c = read_lifetime_counters(root)
    print(f"disk tier: {root}")
    print(f"  {len(index):,} blocks, {nbytes(sum(e.num_bytes for e in index.values()))}")
    print(f"  hits {c.num_hits:,} blocks · written {c.num_writes:,} · evicted {c.num_evictions:,} · "
          f"corrupt (recomputed) {c.num_corrupt:,} · dropped writes {c.num_dropped:,}")
    return 0
