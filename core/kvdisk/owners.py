"""Which model each disk-tier fingerprint belongs to, so `llmchat rm` can remove a model's KV blocks.

Every entry's header names the model fingerprint it was computed with (core/kvdisk/entry.py), but a
fingerprint is a hash: `owners.json` in the tier's folder maps each fingerprint to the model folder the engine
loaded (written, under the folder's lock, when an engine opens the tier). `remove_model_entries` deletes every
entry whose fingerprint belongs to one of the given folders, reading only the entries' headers.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from .entry import MAGIC, MAX_HEADER_BYTES
from .folder import ENTRY_SUFFIX, entry_path, scan

OWNERS_FILE = "owners.json"


def read_owners(root: Path) -> dict[str, str]:
    try:
        data = json.loads((root / OWNERS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}


def _write_owners(root: Path, owners: dict[str, str]) -> None:
    tmp = root / f"{OWNERS_FILE}.{os.getpid()}.part"
    tmp.write_text(json.dumps(owners, indent=1, sort_keys=True))
    os.replace(tmp, root / OWNERS_FILE)


def record_owner(root: Path, fingerprint: bytes, model_folder: str) -> None:
    """Remember that `fingerprint`'s blocks are of the model loaded from `model_folder` (best effort)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        with open(root / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            owners = read_owners(root)
            if owners.get(fingerprint.hex()) != model_folder:
                owners[fingerprint.hex()] = model_folder
                _write_owners(root, owners)
    except OSError:  # a read-only cache: rm will then leave these blocks to the LRU budget
        pass


def entry_fingerprint(path: Path) -> str | None:
    """The fingerprint (hex) an entry's header names; None when the header cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC) + 4)
            if len(head) < len(MAGIC) + 4 or head[: len(MAGIC)] != MAGIC:
                return None
            length = int.from_bytes(head[len(MAGIC):], "little")
            if length > MAX_HEADER_BYTES:
                return None
            header = json.loads(f.read(length))
        value = header.get("fingerprint") if isinstance(header, dict) else None
        return value if isinstance(value, str) else None
    except (OSError, ValueError):
        return None


def remove_model_entries(root: Path, model_folders: set[str]) -> tuple[int, int]:
    """Delete the entries of the models loaded from `model_folders`; (entries removed, bytes freed)."""
    if not root.is_dir():
        return 0, 0
    with open(root / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        owners = read_owners(root)
        doomed = {fp for fp, folder in owners.items() if folder in model_folders}
        if not doomed:
            return 0, 0
        index, _ = scan(root, clean_temp=False)
        num_entries = num_bytes = 0
        for block_hash, entry in index.items():
            path = entry_path(root, block_hash)
            if path.name.endswith(ENTRY_SUFFIX) and entry_fingerprint(path) in doomed:
                path.unlink(missing_ok=True)
                num_entries += 1
                num_bytes += entry.num_bytes
        _write_owners(root, {fp: f for fp, f in owners.items() if fp not in doomed})
    return num_entries, num_bytes
