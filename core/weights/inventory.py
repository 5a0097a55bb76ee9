"""Every model on this machine, wherever it lives: llmchat's cache, the Hugging Face cache, Ollama's store and
LM Studio's folder; with what each is (from its header: core/weights/gguf_summary.py), its size on disk, and
whose files they are (`owner`: only "llmchat" ones may `llmchat rm` delete).

Headers are read once per file: `<llmchat cache>/catalog.json` keeps each summary under the file's path with
its size and mtime, so listing again costs a `stat` per file.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .cache import write_json_atomic
from .errors import ModelLoadError
from .gguf_summary import ModelSummary, summarize_folder, summarize_gguf
from .names import is_model_gguf, quant_of

MEMO = "catalog.json"
SOURCES = {"llmchat": "llmchat's cache", "huggingface": "the Hugging Face cache", "ollama": "Ollama's store",
           "lmstudio": "LM Studio's folder"}


@dataclass(frozen=True, slots=True)
class ModelEntry:
    name: str  # what --model takes
    source: str  # "llmchat" | "huggingface" | "ollama" | "lmstudio"
    owner: str  # whose files: "llmchat" (pulled or fetched by it) or the other app's name
    path: str  # the GGUF file or the Hugging Face folder
    size_bytes: int
    architecture: str | None = None
    quantization: str | None = None
    num_params: int | None = None
    context_length: int | None = None
    problem: str | None = None  # why the header could not be read (the entry is still listed)

    def as_json(self) -> dict:
        return asdict(self)


def disk_size(path: Path) -> int:
    """Bytes on disk of a file, or of a folder's files (symlinks followed, as the HF cache's are)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class _Memo:
    def __init__(self, cache: Path) -> None:
        self.path = cache / MEMO
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        self.data: dict = data if isinstance(data, dict) else {}
        self.changed = False

    def summary(self, path: Path) -> tuple[ModelSummary | None, str | None]:
        stat = path.stat()
        key, stamp = str(path), [stat.st_size, stat.st_mtime_ns]
        hit = self.data.get(key)
        if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("summary"), dict):
            try:
                return ModelSummary(**hit["summary"]), None
            except TypeError:
                pass
        try:
            summary = summarize_folder(path) if path.is_dir() else summarize_gguf(path)
        except ModelLoadError as e:
            return None, str(e)
        self.data[key] = {"stamp": stamp, "summary": asdict(summary)}
        self.changed = True
        return summary, None

    def save(self) -> None:
        if self.changed:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(self.path, self.data)
            except OSError:  # a memo only saves time
                pass


def _entry(memo: _Memo, name: str, source: str, owner: str, path: Path) -> ModelEntry:
    summary, problem = memo.summary(path)
    facts = asdict(summary) if summary else {}
    facts.pop("name", None)
    return ModelEntry(name, source, owner, str(path), disk_size(path), **facts, problem=problem)


def _llmchat_entries(memo: _Memo, cache: Path) -> list[ModelEntry]:
    from .resolve import DEFAULT_GGUF_NAME, ModelLoadError as _E, default_gguf_path

    out = []
    try:
        default = default_gguf_path(download=False)
        out.append(_entry(memo, "default", "llmchat", "llmchat" if default.is_relative_to(cache) else "pip", default))
    except _E:
        pass
    for path in sorted((cache / "models").glob("*.gguf")):
        if path.name != DEFAULT_GGUF_NAME:
            out.append(_entry(memo, path.name, "llmchat", "llmchat", path))
    return out


def _hub_entries(memo: _Memo) -> list[ModelEntry]:
    from .hub import cached_files, hf_cache_dir
    from .owned import read_pulled

    pulled = read_pulled()
    out = []
    for folder in sorted(hf_cache_dir().glob("models--*--*")):
        repo = folder.name.removeprefix("models--").replace("--", "/", 1)
        if (cached := cached_files(repo)) is None:
            continue
        snapshot, files = cached
        ggufs = [n for n in files if is_model_gguf(n)]
        quants = [quant_of(n) for n in ggufs]
        for name in ggufs:
            tag = quant_of(name)
            if len(ggufs) > 1 and (tag is None or quants.count(tag) > 1):
                tag = name
            owner = "llmchat" if name in pulled.get(repo, []) else "huggingface"
            out.append(_entry(memo, repo + (f":{tag}" if tag else ""), "huggingface",
                              owner, snapshot / name))
        if not ggufs and "config.json" in files and any(n.endswith(".safetensors") for n in files):
            owner = "llmchat" if repo in pulled else "huggingface"
            out.append(_entry(memo, repo, "huggingface", owner, snapshot))
    return out


def list_models() -> tuple[list[ModelEntry], list[str]]:
    """Every model found, and one line per thing that looked like a model but cannot be used."""
    from .lmstudio import list_lmstudio
    from .ollama import list_ollama
    from .resolve import cache_dir

    memo = _Memo(cache_dir())
    entries = _llmchat_entries(memo, cache_dir()) + _hub_entries(memo)
    ollama, problems = list_ollama()
    entries += [_entry(memo, f"ollama:{m.name}", "ollama", "ollama", m.blob) for m in ollama]
    entries += [_entry(memo, m.name, "lmstudio", "lmstudio", m.path) for m in list_lmstudio()]
    memo.save()
    return entries, problems


def describe(path: Path, name: str, source: str = "path") -> ModelEntry:
    """One model file or folder, described like the listed ones (for a recently used path)."""
    from .resolve import cache_dir

    memo = _Memo(cache_dir())
    entry = _entry(memo, name, source, "you", path)
    memo.save()
    return entry
