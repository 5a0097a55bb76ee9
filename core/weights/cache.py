"""The converted-model cache: entries written atomically and durably, verified before use, temp dirs swept.

An entry is a folder `<cache>/converted/<sha256[:16] of the GGUF>/` holding the Hugging Face files plus
`manifest.json` (size and sha256 of every file, computed when it was written). Hashing the 0.5 GB
`model.safetensors` takes about a second, so it is done at conversion and again only when the file's
stat fingerprint (size, mtime, ctime, inode) differs from the one recorded in `verified.json` at the last
full check: any write through the file system changes ctime, so a flipped byte or a truncation is caught,
while a warm start costs a few `stat` calls and hashes only the small files.

Temp folders are named `.tmp-<kind>-<pid>-...`; `sweep_temps` removes those whose process is gone (a
kill -9 during conversion) so they do not stay forever.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from .checkpoint import HF_FILES
from .errors import ModelLoadError

WEIGHTS = "model.safetensors"
MANIFEST = "manifest.json"
STAMP = "verified.json"  # the stat fingerprint of WEIGHTS when its hash last matched the manifest
ENTRY_FILES = (*HF_FILES, WEIGHTS)
_SAMPLE = 1 << 20  # bytes hashed at each end of a source file for the memo key
_ORPHAN_SECONDS = 600  # a temp dir without a pid in its name (older versions) is stale after this


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fingerprint(path: Path) -> list[int]:
    """What changes whenever the file is written, replaced or truncated: size, mtime, ctime, inode, device."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def sample_sha256(path: Path) -> str:
    """sha256 of the size and the first and last MiB: cheap, and tells apart most same-size files."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h.update(size.to_bytes(8, "little") + f.read(_SAMPLE))
        f.seek(max(0, size - _SAMPLE))
        h.update(f.read(_SAMPLE))
    return h.hexdigest()


def temp_dir(parent: Path, kind: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".tmp-{kind}-{os.getpid()}-", dir=parent))


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return True


def sweep_temps(parent: Path) -> None:
    """Remove `.tmp-*` entries of `parent` left by processes that died (or, without a pid, older than 10 min)."""
    try:
        leftovers = list(parent.glob(".tmp-*"))
    except OSError:
        return
    for path in leftovers:
        parts = path.name.split("-")
        pid = int(parts[2]) if len(parts) > 3 and parts[2].isdigit() else None
        try:
            stale = (not _process_alive(pid) if pid is not None
                     else time.time() - path.stat().st_mtime > _ORPHAN_SECONDS)
            if stale:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        except OSError:
            pass  # someone else removed it, or it is not ours to remove


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".tmp-json-{os.getpid()}-{path.name}")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _manifest_of(folder: Path) -> dict[str, Any]:
    return {"files": {name: {"size": (folder / name).stat().st_size, "sha256": file_sha256(folder / name)}
                      for name in ENTRY_FILES}}


def write_entry(out_dir: Path, tensors: dict[str, Any], files: dict[str, str], source: str) -> None:
    """Write an entry in a temp dir beside `out_dir` (data fsynced), then rename it into place."""
    from safetensors.numpy import save_file

    tmp: Path | None = None
    try:
        tmp = temp_dir(out_dir.parent, "convert")
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": "pt", "source": source})
        for name, text in files.items():
            (tmp / name).write_text(text)
        write_json_atomic(tmp / MANIFEST, _manifest_of(tmp))
        for name in (*ENTRY_FILES, ""):  # every file, then the folder itself
            _fsync(tmp / name)
        if out_dir.exists():  # a damaged or incomplete entry (or one a concurrent process just wrote): replace it
            stale = temp_dir(out_dir.parent, "stale")
            os.replace(out_dir, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        os.rename(tmp, out_dir)
        tmp = None
        _fsync(out_dir.parent)
        write_json_atomic(out_dir / STAMP, fingerprint(out_dir / WEIGHTS))
    except OSError as e:  # disk full, read-only cache, ...
        raise ModelLoadError(f"cannot write the converted model to {out_dir} ({e}): free some space or set "
                             "LLMCHAT_CACHE_DIR to a writable folder") from e
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _safetensors_complete(path: Path) -> bool:
    """The header parses and the file is exactly as long as the header says (no truncation, no tail)."""
    try:
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(min(header_len, 1 << 27)))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        return path.stat().st_size == 8 + header_len + max(ends, default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, struct.error):
        return False


def check_entry(folder: Path) -> str | None:
    """None when the entry can be used as it is; otherwise why it must be converted again."""
    if not all((folder / name).is_file() for name in ENTRY_FILES):
        return "incomplete" if folder.exists() else "missing"
    manifest = _read_json(folder / MANIFEST)
    try:
        if manifest is None:  # written by a version without manifests: adopt it if it is whole
            if not _safetensors_complete(folder / WEIGHTS):
                return f"{WEIGHTS} is truncated or damaged"
            _record(folder, MANIFEST, _manifest_of(folder))
            _record(folder, STAMP, fingerprint(folder / WEIGHTS))
            return None
        want = manifest["files"]
        for name in ENTRY_FILES:
            if (size := (folder / name).stat().st_size) != want[name]["size"]:
                return f"{name} has {size} bytes where {want[name]['size']} were written (truncated or replaced)"
            if name == WEIGHTS and _read_json(folder / STAMP) == (stamp := fingerprint(folder / name)):
                continue  # unchanged since its last full check
            if file_sha256(folder / name) != want[name]["sha256"]:
                return f"{name} does not match the checksum recorded at conversion (modified or damaged)"
            if name == WEIGHTS:
                _record(folder, STAMP, stamp)
    except (OSError, KeyError, TypeError) as e:
        return f"cannot be verified ({e})"
    return None


def _record(folder: Path, name: str, data: Any) -> None:
    """Best effort: on a read-only cache the check is only repeated next time."""
    try:
        write_json_atomic(folder / name, data)
    except OSError:
        pass
