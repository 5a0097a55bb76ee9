"""What llmchat itself downloaded into shared places: `<llmchat cache>/pulled.json`, repo -> the files it pulled.

The Hugging Face cache is shared with every app that uses `huggingface_hub`; a file there is llmchat's to
remove only when llmchat pulled it (this record says so), never when another app did.
"""
from __future__ import annotations

import json
from pathlib import Path

from .cache import write_json_atomic

PULLED = "pulled.json"


def _path() -> Path:
    from .resolve import cache_dir

    return cache_dir() / PULLED


def read_pulled() -> dict[str, list[str]]:
    try:
        data = json.loads(_path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {repo: [f for f in files if isinstance(f, str)] for repo, files in data.items()
            if isinstance(repo, str) and isinstance(files, list)}


def record_pulled(repo: str, files: list[str]) -> None:
    data = read_pulled()
    data[repo] = sorted(set(data.get(repo, [])) | set(files))
    _path().parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(_path(), data)


def forget_pulled(repo: str, files: list[str] | None) -> None:
    """Drop `files` (None: all) of `repo` from the record."""
    data = read_pulled()
    left = [] if files is None else [f for f in data.get(repo, []) if f not in files]
    if left:
        data[repo] = left
    else:
        data.pop(repo, None)
    write_json_atomic(_path(), data)
