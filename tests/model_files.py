"""Small model files and other apps' stores for the model-catalog tests: GGUFs written with the `gguf` package,
an Ollama store (manifests + blobs, as Ollama lays them out) and an LM Studio folder."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest


def write_tiny_gguf(path: Path, arch: str = "llama", file_type: int = 15, context_length: int = 4096,
                    shapes: tuple[tuple[int, ...], ...] = ((8, 4), (16,))) -> Path:
    """A valid GGUF header with a few F32 tensors (file_type 15 = MOSTLY_Q4_K_M, as metadata says)."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(path.stem)
    writer.add_file_type(file_type)
    writer.add_context_length(context_length)
    writer.add_token_list(["<s>", "</s>", "hello"])
    for i, shape in enumerate(shapes):
        writer.add_tensor(f"blk.{i}.weight", np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def place(src: Path, dest: Path) -> Path:
    """`dest` holding `src`'s bytes: a hard link when the file system allows it (the 98 MB model), else a copy."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        return dest
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
    return dest


def ollama_store(root: Path, name: str, tag: str, gguf: Path, namespace: str = "library") -> Path:
    """Ollama's layout: manifests/registry.ollama.ai/NAMESPACE/NAME/TAG -> layers -> blobs/sha256-HEX."""
    with open(gguf, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    place(gguf, root / "blobs" / f"sha256-{digest}")
    template = b"{{ .Prompt }}"
    template_digest = hashlib.sha256(template).hexdigest()
    (root / "blobs" / f"sha256-{template_digest}").write_bytes(template)
    manifest = root / "manifests" / "registry.ollama.ai" / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": f"sha256:{template_digest}", "size": len(template)},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
             "size": gguf.stat().st_size},
            {"mediaType": "application/vnd.ollama.image.template", "digest": f"sha256:{template_digest}",
             "size": len(template)},
        ]}))
    return manifest


@pytest.fixture
def stores(tmp_path, monkeypatch) -> dict[str, Path]:
    """Empty, private places for every store: the HF cache, Ollama's root, a home for LM Studio's folder."""
    places = {"hf": tmp_path / "hf-cache", "ollama": tmp_path / "ollama", "home": tmp_path / "home"}
    for p in places.values():
        p.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(places["hf"]))
    monkeypatch.setenv("OLLAMA_MODELS", str(places["ollama"]))
    monkeypatch.setenv("HOME", str(places["home"]))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)  # (test_tokenizer sets both at import)
    # huggingface_hub read them when it was imported; the tests that set HF_HUB_OFFLINE again are answered by
    # llmchat from the cache before the library is asked anything
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    return places
