"""What a model name means: a path, a Hub repo with a quantization, an Ollama or LM Studio model, a catalog name.

    ./model.gguf, ~/models/qwen/          a path (an existing path always wins)
    org/repo:Q4_K_M   hf:org/repo:Q4_K_M  the GGUF in a Hub repo whose name carries that type (or :FILE.gguf)
    org/repo                              a repo's only GGUF, or a repo of safetensors (a Hugging Face folder)
    ollama:llama3.2:1b                    Ollama's store, read in place (default tag: latest)
    lmstudio:publisher/repo:Q4_K_M        LM Studio's models folder, read in place
    SmolLM2-135M-Instruct.Q4_1.gguf       a file in llmchat's own models folder (as `llmchat models` lists it)

`pick_gguf` chooses among a repo's files the way llama.cpp's `-hf org/repo:TAG` does: the quantization is a
separate word of the file name (case ignored), never part of a longer one (Q4_K is not Q4_K_M).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelLoadError

_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_QUANT = re.compile(r"^(?:I?Q\d+(?:_[A-Z0-9]+)+|TQ\d_\d|MXFP4(?:_MOE)?|BF16|F16|F32|FP16|FP32)$", re.IGNORECASE)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
HINT = ("pass a path (.gguf file or Hugging Face folder), org/repo[:QUANT] from the Hugging Face Hub, "
        "ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO[:QUANT], or a name `llmchat models` lists")


@dataclass(frozen=True, slots=True)
class ModelRef:
    kind: str  # "default" | "path" | "hub" | "ollama" | "lmstudio" | "cache"
    name: str  # the path, "org/repo", the Ollama "name:tag", "publisher/repo", or the cached file's name
    quant: str | None = None  # the tag after ':' ("Q4_K_M" or a file name), hub and lmstudio only

    def __str__(self) -> str:
        prefix = {"ollama": "ollama:", "lmstudio": "lmstudio:"}.get(self.kind, "")
        return f"{prefix}{self.name}{':' + self.quant if self.quant else ''}"


def _repo_and_tag(text: str, what: str) -> tuple[str, str | None]:
    repo, _, tag = text.partition(":")
    if not _REPO.match(repo) or ".." in repo or (_ and not tag):
        raise ModelLoadError(f"{what} {text!r} is not of the form org/repo[:QUANT]: {HINT}")
    return repo, tag or None


def parse_model_name(text: str | None, cache_models: Path | None = None) -> ModelRef:
    """What `text` names; ModelLoadError (one line) when it names nothing this app can look up."""
    if text is None or text.strip() in ("", "default"):
        return ModelRef("default", "default")
    text = text.strip()
    if Path(text).expanduser().exists():
        return ModelRef("path", str(Path(text).expanduser()))
    if text.startswith("ollama:"):
        name = text.removeprefix("ollama:")
        if not re.fullmatch(r"[\w.-]+(?:/[\w.-]+)*(?::[\w.-]+)?", name) or ".." in name:
            raise ModelLoadError(f"{text!r} is not an Ollama name (ollama:NAME[:TAG], e.g. ollama:llama3.2:1b)")
        return ModelRef("ollama", name if ":" in name else f"{name}:latest")
    if text.startswith("lmstudio:"):
        repo, tag = _repo_and_tag(text.removeprefix("lmstudio:"), "the LM Studio model")
        return ModelRef("lmstudio", repo, tag)
    if text.startswith("hf:") or text.startswith("hf.co/") or text.startswith("huggingface.co/"):
        repo, tag = _repo_and_tag(text.split(":", 1)[1] if text.startswith("hf:") else text.split("/", 1)[1],
                                  "the Hub repo")
        return ModelRef("hub", repo, tag)
    if cache_models is not None and "/" not in text and (cache_models / text).is_file():
        return ModelRef("cache", text)
    if "/" in text and _REPO.match(text.partition(":")[0]):
        repo, tag = _repo_and_tag(text, "the Hub repo")
        return ModelRef("hub", repo, tag)
    if text.endswith(".gguf") or "/" in text or text.startswith((".", "~")):
        raise ModelLoadError(f"model not found: {text} (no such file or folder)")
    raise ModelLoadError(f"unknown model name {text!r}: {HINT}")


def quant_of(filename: str) -> str | None:
    """The quantization word in a GGUF file's name ("Llama-3.2-1B-Instruct-Q4_K_M.gguf" -> "Q4_K_M")."""
    stem = _SPLIT.sub("", Path(filename).name)
    stem = stem[:-5] if stem.lower().endswith(".gguf") else stem
    words = [w for w in re.split(r"[-.]", stem) if _QUANT.match(w)]
    return words[-1].upper() if words else None


def is_model_gguf(filename: str) -> bool:
    """A GGUF that holds a language model (not a vision projector, not the 2nd..nth part of a split file)."""
    name = Path(filename).name.lower()
    if not name.endswith(".gguf") or name.startswith("mmproj") or "mmproj" in name.split("-"):
        return False
    split = _SPLIT.search(name)
    return split is None or split.group(1) == "00001"


def is_split(filename: str) -> bool:
    return _SPLIT.search(filename) is not None


def _listing(files: dict[str, int]) -> str:
    return ", ".join(f"{name} ({size / 1e6:,.0f} MB)" for name, size in sorted(files.items()))


def pick_gguf(files: dict[str, int], tag: str | None, where: str) -> str:
    """The one GGUF of `files` (path in repo -> size) that `tag` names; ModelLoadError listing them otherwise."""
    ggufs = {name: size for name, size in files.items() if is_model_gguf(name)}
    if not ggufs:
        raise ModelLoadError(f"{where} has no GGUF file" + (
            " (it holds safetensors: drop the :QUANT to use it as a Hugging Face folder)"
            if tag and any(n.endswith(".safetensors") for n in files) else ""))
    if tag is None:
        if len(ggufs) == 1:
            return next(iter(ggufs))
        raise ModelLoadError(f"{where} has {len(ggufs)} GGUF files; name one with :QUANT or :FILE.gguf — "
                             f"{_listing(ggufs)}")
    if tag.lower().endswith(".gguf"):
        found = [n for n in ggufs if n == tag or Path(n).name == tag]
    else:
        found = [n for n in ggufs if (quant_of(n) or "").lower() == tag.lower()]
        if not found:  # llama.cpp also accepts a tag that is a word of the name but not a known type
            found = [n for n in ggufs if tag.lower() in re.split(r"[-.]", Path(n).name.lower())]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ModelLoadError(f"{where} has no GGUF for {tag!r}; it holds {_listing(ggufs)}")
    raise ModelLoadError(f"{where} has {len(found)} GGUF files for {tag!r}; name one with :FILE.gguf — "
                         f"{_listing({n: ggufs[n] for n in found})}")
