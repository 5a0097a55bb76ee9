"""A model's name -> the file or folder on this machine that holds it, fetched first when it is the Hub's.

This is the one place names are looked up (core/weights/names.py says what they mean): `resolve_model` calls
`locate_model` and then reads, converts or loads what it returns; `llmchat pull` calls it with `pull=True`.
Ollama's and LM Studio's files are returned where they are (read in place, never copied).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .errors import ModelLoadError
from .names import ModelRef, parse_model_name

Progress = Callable[[str], None]


def model_ref(model: str | Path | None) -> ModelRef:
    from .resolve import cache_dir

    return parse_model_name(None if model is None else str(model), cache_dir() / "models")


def locate_model(model: str | Path | None, progress: Progress | None = None, pull: bool = False) -> Path:
    """The GGUF file or Hugging Face folder `model` names (None: the default model); ModelLoadError otherwise."""
    from .resolve import cache_dir, default_gguf_path

    ref = model_ref(model)
    if ref.kind == "default":
        return default_gguf_path(True, progress)
    if ref.kind == "path":
        return Path(ref.name)
    if ref.kind == "cache":
        return cache_dir() / "models" / ref.name
    if ref.kind == "ollama":
        from .ollama import find_ollama

        return find_ollama(ref.name).blob
    if ref.kind == "lmstudio":
        from .lmstudio import find_lmstudio

        return find_lmstudio(ref.name, ref.quant)
    if ref.kind == "hub":
        from .hub import hub_model

        return hub_model(ref.name, ref.quant, progress, pull=pull)
    raise AssertionError(ref)


def pull_model(model: str | None, progress: Progress | None = None) -> Path:
    """What `llmchat pull [NAME]` runs: fetch (or update) the model; another app's model is only found."""
    ref = model_ref(model)
    if ref.kind == "path":
        raise ModelLoadError(f"{ref.name} is a local path: there is nothing to pull (use it with --model)")
    return locate_model(model, progress, pull=True)
