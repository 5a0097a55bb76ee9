"""The disk tier's folder, `<cache dir>/kv/`: one entry file per full KV block under a two-hex-digit
subfolder, named by its chain hash (`ab/ab12….kvb`); temp files `….<pid>.<n>.tmp` of writes in flight;
`stats.json`, the counters of every process (added under an flock on `lock`). Scanning it (and removing the
temp files of dead writers), clearing it, and the lifetime counters live here; core/kvdisk/store.py keeps
the live index, the writer thread and the LRU budget. The folder is 0700, the files 0600.
"""
from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..api.metrics import DiskCounters
from ..pids import pid_alive

ENTRY_SUFFIX = ".kvb"
TEMP_SUFFIX = ".tmp"
STATS_FILE = "stats.json"


def default_kv_disk_dir() -> Path:
    """`<cache dir>/kv` ($LLMCHAT_CACHE_DIR overrides the cache dir, as for models)."""
    from ..weights.resolve import cache_dir

    return cache_dir() / "kv"


@dataclass(slots=True)
class FolderEntry:
    num_bytes: int
    last_used: float


def entry_path(root: Path, block_hash: bytes) -> Path:
    name = block_hash.hex()
    return root / name[:2] / (name + ENTRY_SUFFIX)


def _pid_alive(pid: int) -> bool:
    # a temp file of our own pid at start is from an earlier process that had it
    return pid != os.getpid() and pid_alive(pid)


def scan(root: Path, clean_temp: bool) -> tuple[dict[bytes, FolderEntry], int]:
    """The entries under root (hash -> size, last use) and how many dead temp files were removed."""
    index: dict[bytes, FolderEntry] = {}
    cleaned = 0
    if not root.is_dir():
        return index, cleaned
    for sub in os.scandir(root):
        if not sub.is_dir(follow_symlinks=False) or len(sub.name) != 2:
            continue
        for f in os.scandir(sub.path):
            name = f.name
            if name.endswith(TEMP_SUFFIX):
                parts = name.split(".")
                pid = int(parts[1]) if len(parts) == 4 and parts[1].isdigit() else -1
                if clean_temp and not _pid_alive(pid):
                    Path(f.path).unlink(missing_ok=True)
                    cleaned += 1
                continue
            if not name.endswith(ENTRY_SUFFIX):
                continue
            try:
                block_hash = bytes.fromhex(name[: -len(ENTRY_SUFFIX)])
                st = f.stat(follow_symlinks=False)
            except (ValueError, FileNotFoundError):
                continue
            index[block_hash] = FolderEntry(st.st_size, st.st_mtime)
    return index, cleaned


def read_lifetime_counters(root: Path) -> DiskCounters:
    try:
        raw = json.loads((root / STATS_FILE).read_text())
        return DiskCounters(**{f.name: int(raw.get(f.name, 0)) for f in fields(DiskCounters)})
    except (OSError, ValueError, TypeError, AttributeError):
        return DiskCounters()


def add_lifetime_counters(root: Path, delta: DiskCounters | None) -> None:
    """Add delta to stats.json (None: reset it), under an exclusive lock on root/lock."""
    with open(root / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        total = DiskCounters() if delta is None else read_lifetime_counters(root).plus(delta)
        tmp = root / f"{STATS_FILE}.{os.getpid()}.part"
        tmp.write_text(json.dumps(asdict(total)))
        os.replace(tmp, root / STATS_FILE)


def clear_store(root: Path) -> tuple[int, int]:
    """Remove every entry (and dead temp files); (entries removed, bytes freed). Counters are reset."""
    index, _ = scan(root, clean_temp=True)
    for block_hash in index:
        entry_path(root, block_hash).unlink(missing_ok=True)
    if root.is_dir():
        add_lifetime_counters(root, None)
    return len(index), sum(e.num_bytes for e in index.values())


def make_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
