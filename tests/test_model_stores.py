"""Other apps' models, read in place: a fabricated Ollama store (manifest + blob = a GGUF) and LM Studio folder
are found, listed, loaded where they are, and `llmchat rm` refuses them; damaged stores are one line each.
And `rm` of llmchat's own model removes its disk-tier KV blocks (the owners record), no other model's."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from model_files import ollama_store, place, stores, write_tiny_gguf  # noqa: F401  (stores is a fixture)
from llmchat.core.weights.errors import ModelLoadError
from llmchat.core.weights.inventory import list_models
from llmchat.core.weights.locate import locate_model


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_ollama_models_are_found_listed_and_never_removed(stores, tmp_path):
    gguf = write_tiny_gguf(tmp_path / "src.gguf", file_type=7, context_length=2048)
    manifest = ollama_store(stores["ollama"], "tiny", "1b", gguf)
    ollama_store(stores["ollama"], "tiny", "latest", gguf, namespace="someone")
    blob = locate_model("ollama:tiny:1b")
    assert blob.parent == stores["ollama"] / "blobs" and blob.name.startswith("sha256-")  # the blob itself
    assert blob.read_bytes() == gguf.read_bytes() and locate_model("ollama:someone/tiny") == blob
    entries, problems = list_models()
    rows = {e.name: e for e in entries if e.source == "ollama"}
    assert sorted(rows) == ["ollama:someone/tiny:latest", "ollama:tiny:1b"] and problems == []
    assert (rows["ollama:tiny:1b"].quantization, rows["ollama:tiny:1b"].context_length) == ("Q8_0", 2048)
    assert rows["ollama:tiny:1b"].owner == "ollama" and rows["ollama:tiny:1b"].path == str(blob)
    refused = cli("rm", "ollama:tiny:1b")
    assert refused.returncode == 2 and "is Ollama's" in refused.stderr and "`ollama rm tiny:1b`" in refused.stderr
    assert str(manifest) in refused.stderr and blob.is_file() and manifest.is_file()


@pytest.mark.parametrize("damage, says", [
    (lambda m, b: m.write_text("{not json"), "Ollama's manifest .* is damaged"),
    (lambda m, b: m.write_text(json.dumps({"layers": []})), "has 0 model layers where one was expected"),
    (lambda m, b: b.write_bytes(b"PK\x03\x04 a zip, not a model"), "is not a GGUF file"),
    (lambda m, b: b.unlink(), "blob sha256-.* is missing"),
])
def test_a_damaged_ollama_store_is_one_line(stores, tmp_path, damage, says):
    gguf = write_tiny_gguf(tmp_path / "src.gguf")
    manifest = ollama_store(stores["ollama"], "tiny", "latest", gguf)
    blob = next(p for p in (stores["ollama"] / "blobs").iterdir() if p.stat().st_size == gguf.stat().st_size)
    damage(manifest, blob)
    with pytest.raises(ModelLoadError, match=says) as e:
        locate_model("ollama:tiny")
    assert "`ollama pull tiny:latest` repairs it" in str(e.value) or "not a GGUF" in str(e.value)
    entries, problems = list_models()
    assert not [e for e in entries if e.source == "ollama"] and len(problems) == 1 and "\n" not in problems[0]


def test_lm_studio_models_are_found_by_quantization_and_never_removed(stores, tmp_path):
    folder = stores["home"] / ".lmstudio" / "models" / "lmstudio-community" / "Tiny-GGUF"
    write_tiny_gguf(folder / "Tiny-Q4_K_M.gguf")
    write_tiny_gguf(folder / "Tiny-Q8_0.gguf", file_type=7)
    assert locate_model("lmstudio:lmstudio-community/Tiny-GGUF:Q8_0") == folder / "Tiny-Q8_0.gguf"
    with pytest.raises(ModelLoadError, match="has 2 GGUF files; name one"):
        locate_model("lmstudio:lmstudio-community/Tiny-GGUF")
    names = sorted(e.name for e in list_models()[0] if e.source == "lmstudio")
    assert names == ["lmstudio:lmstudio-community/Tiny-GGUF:Q4_K_M", "lmstudio:lmstudio-community/Tiny-GGUF:Q8_0"]
    refused = cli("rm", "lmstudio:lmstudio-community/Tiny-GGUF:Q8_0")
    assert refused.returncode == 2 and "is LM Studio's" in refused.stderr and (folder / "Tiny-Q8_0.gguf").is_file()


def test_lm_studios_chosen_models_directory_is_read_and_a_damaged_settings_file_ignored(stores, tmp_path):
    chosen = tmp_path / "big-disk" / "lm-models"
    write_tiny_gguf(chosen / "pub" / "Chosen-GGUF" / "Chosen-Q8_0.gguf", file_type=7)
    settings = stores["home"] / ".lmstudio" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"downloadsFolder": str(chosen), "theme": "dark"}))
    assert locate_model("lmstudio:pub/Chosen-GGUF") == chosen / "pub" / "Chosen-GGUF" / "Chosen-Q8_0.gguf"
    assert "lmstudio:pub/Chosen-GGUF:Q8_0" in {e.name for e in list_models()[0]}
    settings.write_text("{not json")
    with pytest.raises(ModelLoadError):
        locate_model("lmstudio:pub/Chosen-GGUF")


@pytest.mark.slow
def test_the_default_model_answers_from_ollamas_store_in_place(stores, default_gguf):
    ollama_store(stores["ollama"], "smollm2", "135m", default_gguf)
    done = cli("ask", "-m", "ollama:smollm2:135m", "--temperature", "0", "--max-tokens", "12", "--no-kv-disk",
               "What is the capital of France? Answer in one sentence.")
    assert done.returncode == 0, done.stderr
    assert "The capital of France is Paris." in done.stdout
    assert list((stores["ollama"]).rglob("*.gguf")) == []  # nothing was copied into (or out of) the store


def test_rm_removes_llmchats_own_model_with_its_kv_blocks_and_no_others(stores, tmp_path, monkeypatch):
    from llmchat.core.kvdisk.entry import BlockKey, BlockLayout, encode_header
    from llmchat.core.kvdisk.folder import entry_path
    from llmchat.core.kvdisk.owners import read_owners, record_owner
    from llmchat.core.kvdisk.folder import default_kv_disk_dir
    from llmchat.core.weights.resolve import cache_dir

    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(tmp_path / "own-cache"))  # (the tests' models/ is the user's own)
    mine = write_tiny_gguf(cache_dir() / "models" / "mine-Q8_0.gguf", file_type=7)
    other = write_tiny_gguf(tmp_path / "other.gguf")
    root = default_kv_disk_dir()
    written = {}
    for i, (folder, fp) in enumerate([(str(mine), b"m" * 16), (str(mine), b"n" * 16), (str(other), b"o" * 16)] * 2):
        record_owner(root, fp, folder)
        payload = memoryview(bytes([i]) * 32)
        key = BlockKey(bytes([i]) * 32, None, (i,))
        path = entry_path(root, key.block_hash)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_header(key, BlockLayout(fp, "float32", (1, 2, 16), 32), payload) + payload)
        written[path] = folder
    done = cli("rm", "mine-Q8_0.gguf")
    assert done.returncode == 0, done.stderr
    assert "4 KV blocks" in done.stdout and not mine.exists()
    assert sorted(p for p in written if p.exists()) == sorted(p for p, f in written.items() if f == str(other))
    assert set(read_owners(root).values()) == {str(other)}
    refused = cli("rm", "mine-Q8_0.gguf")
    assert refused.returncode == 2 and "model not found: mine-Q8_0.gguf" in refused.stderr
