"""The models the app can switch to: the default model, the recently used --model names (kept, newest first, as
a JSON list in the store's app settings by the caller), the models in the cache dir, then every other model
`llmchat models` finds (core/weights/inventory.py: the HF cache, Ollama, LM Studio).

The cache dir holds fetched GGUF files in `models/` (`llmchat pull`) and their conversions in `converted/<digest>/`
(Hugging Face folders, core/weights/resolve.py); `converted/sources.json` says which file each came from. A conversion
whose source file is still there is listed as that file (loading it finds the conversion again); one whose source
is gone is listed as the folder itself. Stdlib only: listing loads nothing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MAX_RECENT = 10
RECENT_SETTING = "recent_models"  # the store's app setting that holds the list


@dataclass(frozen=True, slots=True)
class ModelChoice:
    label: str  # what the picker shows
    model: str | None  # what --model would be (None: the default model)
    where: str  # "default" | "cache" | "recent" | "huggingface" | "ollama" | "lmstudio"
    detail: str = ""  # size and memory needed against memory free (tui/actions/model_switch.py)
    fits: bool = True  # False: it needs more memory than is free


def _converted_sources(root: Path) -> dict[str, str]:
    """converted folder name -> the source file it was converted from (as sources.json remembers it)."""
    try:
        memo = json.loads((root / "sources.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for source, entry in memo.items() if isinstance(memo, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("sha256"), str):
            out[entry["sha256"][:16]] = source
    return out


def cached_models(cache: Path, default_gguf_name: str) -> list[ModelChoice]:
    """The GGUF files in `cache/models` (but the default's) and the converted folders whose source is gone."""
    out = [ModelChoice(p.name, str(p), "cache") for p in sorted((cache / "models").glob("*.gguf"))
           if p.name != default_gguf_name]
    root = cache / "converted"
    sources = _converted_sources(root)
    listed = {c.model for c in out}
    for folder in sorted(p for p in root.glob("*") if p.is_dir() and (p / "config.json").is_file()):
        source = sources.get(folder.name)
        if source is not None and Path(source).is_file():
            if source not in listed and Path(source).name != default_gguf_name:
                out.append(ModelChoice(Path(source).name, source, "cache"))
                listed.add(source)
        else:
            out.append(ModelChoice(f"{folder.name} (converted; its source is gone)", str(folder), "cache"))
    return out


def parse_recent(raw: str | None) -> list[str]:
    """The stored list of recently used --model paths (anything unreadable counts as none)."""
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [p for p in value if isinstance(p, str) and p][:MAX_RECENT] if isinstance(value, list) else []


def remember(recent: list[str], model: str) -> list[str]:
    """`model` first, then the others (no repeats), at most MAX_RECENT."""
    return [model, *[p for p in recent if p != model]][:MAX_RECENT]


def model_choices(cache: Path, default_gguf_name: str, recent: list[str],
                  others: list[tuple[str, str]] = ()) -> list[ModelChoice]:
    """The default model, the recently used names (paths that still exist), the cache's other models, then
    `others` ((name, source) of the other stores' models) not listed yet."""
    out = [ModelChoice("SmolLM2-135M-Instruct (the default model)", None, "default")]
    seen = set()
    for model in recent:
        is_path = model.startswith(("/", ".", "~")) or Path(model).expanduser().exists()
        if (Path(model).expanduser().exists() or not is_path) and model not in seen:
            out.append(ModelChoice(model, model, "recent"))
            seen.add(model)
    out += [c for c in cached_models(cache, default_gguf_name) if c.model not in seen]
    seen |= {c.model for c in out}
    out += [ModelChoice(name, name, source) for name, source in others if name not in seen and name != "default"]
    return out
