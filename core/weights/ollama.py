"""Ollama's model store, read in place (never copied, never written).

    <root>/manifests/<host>/<namespace>/<model>/<tag>   JSON: {"layers": [{"mediaType", "digest", "size"}, ...]}
    <root>/blobs/sha256-<hex>                            the layer whose mediaType is
                                                         application/vnd.ollama.image.model is the GGUF

The root is $OLLAMA_MODELS, else ~/.ollama/models and the Linux service's /usr/share/ollama/.ollama/models.
`llama3.2:1b` is registry.ollama.ai/library/llama3.2/1b; `user/model:tag` is registry.ollama.ai/user/model/tag;
`hf.co/org/repo:Q4_K_M` is hf.co/org/repo/Q4_K_M.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelLoadError

MODEL_LAYER = "application/vnd.ollama.image.model"
DEFAULT_HOST = "registry.ollama.ai"
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
SERVICE_ROOT = Path("/usr/share/ollama/.ollama/models")


@dataclass(frozen=True, slots=True)
class OllamaModel:
    name: str  # as `ollama list` shows it: "llama3.2:1b"
    manifest: Path
    blob: Path  # the GGUF


def ollama_roots() -> list[Path]:
    if explicit := os.environ.get("OLLAMA_MODELS"):
        return [Path(explicit).expanduser()]
    return [p for p in (Path.home() / ".ollama" / "models", SERVICE_ROOT) if (p / "manifests").is_dir()]


def _manifest_parts(name: str) -> tuple[str, ...]:
    """`name:tag` -> the manifest's path below manifests/."""
    model, _, tag = name.rpartition(":") if ":" in name else (name, "", "latest")
    parts = model.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_HOST, "library", *parts]
    elif len(parts) == 2:
        parts = [DEFAULT_HOST, *parts]
    return (*parts, tag or "latest")


def _display_name(parts: tuple[str, ...]) -> str:
    *model, tag = parts
    if model[:2] == [DEFAULT_HOST, "library"]:
        model = model[2:]
    elif model[0] == DEFAULT_HOST:
        model = model[1:]
    return f"{'/'.join(model)}:{tag}"


def read_manifest(root: Path, manifest: Path, name: str) -> OllamaModel:
    """The model a manifest names; ModelLoadError (one line) when the manifest or its blob is not usable."""
    remedy = f"`ollama pull {name}` repairs it"
    try:
        data = json.loads(manifest.read_text())
        layers = [layer for layer in data["layers"] if layer.get("mediaType") == MODEL_LAYER]
        digest = layers[0]["digest"] if len(layers) == 1 else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise ModelLoadError(f"Ollama's manifest {manifest} is damaged ({type(e).__name__}: {e}): {remedy}") from e
    if digest is None:
        raise ModelLoadError(f"Ollama's manifest {manifest} has {len(layers)} model layers where one was expected: "
                             f"{remedy}")
    match = _DIGEST.match(digest) if isinstance(digest, str) else None
    if match is None:
        raise ModelLoadError(f"Ollama's manifest {manifest} names the blob {digest!r}, not a sha256 digest: {remedy}")
    blob = next((b for b in (root / "blobs" / f"sha256-{match.group(1)}", root / "blobs" / f"sha256:{match.group(1)}")
                 if b.is_file()), None)
    if blob is None:
        raise ModelLoadError(f"Ollama's blob sha256-{match.group(1)[:12]}… for {name} is missing from {root}/blobs: "
                             f"{remedy}")
    try:
        with open(blob, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelLoadError(f"cannot read Ollama's blob {blob} ({e.strerror or e})") from e
    if magic != b"GGUF":
        raise ModelLoadError(f"Ollama's blob {blob} for {name} is not a GGUF file (llmchat reads Ollama's GGUF models "
                             "only)")
    return OllamaModel(name, manifest, blob)


def find_ollama(name: str) -> OllamaModel:
    """`name` (`model[:tag]`) in Ollama's store; ModelLoadError saying where it looked otherwise."""
    roots = ollama_roots()
    parts = _manifest_parts(name)
    for root in roots:
        manifest = root.joinpath("manifests", *parts)
        if manifest.is_file():
            return read_manifest(root, manifest, _display_name(parts))
    where = ", ".join(str(r) for r in roots) or "~/.ollama/models (set OLLAMA_MODELS if Ollama keeps them elsewhere)"
    raise ModelLoadError(f"no Ollama model {name} in {where}: `ollama pull {name}` fetches it")


def list_ollama() -> tuple[list[OllamaModel], list[str]]:
    """Every model in the stores, and one line per manifest that cannot be used."""
    found: list[OllamaModel] = []
    problems: list[str] = []
    for root in ollama_roots():
        base = root / "manifests"
        for manifest in sorted(base.glob("*/*/*/*")):
            if not manifest.is_file():
                continue
            parts = manifest.relative_to(base).parts
            try:
                found.append(read_manifest(root, manifest, _display_name(parts)))
            except ModelLoadError as e:
                problems.append(str(e))
    return found, problems
