"""Models from a Hub-shaped server (HF_ENDPOINT -> tests/hub_server.py) through huggingface_hub: pull by
org/repo:QUANT into the shared HF cache, resume after a cut connection, offline mode from the cache, a
safetensors repo as a Hugging Face folder, `llmchat models` / `rm` of what llmchat pulled (and nothing else)."""
from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys

import pytest

from hub_server import FakeHub
from model_files import stores, write_tiny_gguf  # noqa: F401  (stores is a fixture)
from llmchat.core.weights.errors import ModelLoadError
from llmchat.core.weights.locate import locate_model, pull_model
from llmchat.core.weights.checkpoint import check_hf_folder

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def tiny_repo(tmp_path):
    return {"Tiny-1B-Q4_K_M.gguf": write_tiny_gguf(tmp_path / "src" / "a.gguf", file_type=15),
            "Tiny-1B-Q8_0.gguf": write_tiny_gguf(tmp_path / "src" / "b.gguf", file_type=7),
            "mmproj-Tiny-F16.gguf": b"GGUF-not-a-model", "README.md": b"# tiny"}


@pytest.fixture
def hub(stores, tiny_repo, monkeypatch):
    with FakeHub({"org/tiny": tiny_repo, "org/docs": {"README.md": b"no weights"}}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_pull_by_quantization_into_the_shared_cache_then_use_it_without_the_network(hub, stores, tiny_repo):
    lines: list[str] = []
    path = pull_model("org/tiny:q8_0", progress=lines.append)
    assert path.name == "Tiny-1B-Q8_0.gguf" and path.is_relative_to(stores["hf"] / "models--org--tiny" / "snapshots")
    assert sha256(path) == sha256(tiny_repo["Tiny-1B-Q8_0.gguf"])
    assert lines[0].startswith("fetching Tiny-1B-Q8_0.gguf from org/tiny") and lines[-1] == f"saved {path}"
    assert any("(100%)" in line for line in lines)  # plain progress lines: stderr is not a terminal here
    hub.requests.clear()
    assert locate_model("org/tiny:Q8_0") == path and hub.requests == []  # in the cache: no request at all


@pytest.mark.parametrize("name, says", [
    ("org/tiny", "has 2 GGUF files; name one with :QUANT or :FILE.gguf — Tiny-1B-Q4_K_M.gguf (0 MB), "
                 "Tiny-1B-Q8_0.gguf (0 MB)"),
    ("org/tiny:Q5_K_M", "org/tiny on the Hub has no GGUF for 'Q5_K_M'; it holds Tiny-1B-Q4_K_M.gguf"),
    ("org/nothing:Q4_K_M", "no model org/nothing on the Hub (or it is private: set HF_TOKEN)"),
    ("org/docs", "org/docs on the Hub has neither a GGUF file nor safetensors weights"),
    ("org/docs:Q4_K_M", "org/docs on the Hub has no GGUF file"),
])
def test_what_cannot_be_pulled_is_one_line_and_leaves_nothing(hub, stores, name, says):
    with pytest.raises(ModelLoadError) as e:
        pull_model(name)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not any(p.is_file() for p in stores["hf"].rglob("*.gguf"))


def test_network_down_and_offline_mode(stores, tiny_repo, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{s.getsockname()[1]}")
    with pytest.raises(ModelLoadError, match="could not fetch org/tiny from the Hub .*`llmchat pull org/tiny` resumes"):
        locate_model("org/tiny:Q8_0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="org/tiny is not in the Hugging Face cache .*HF_HUB_OFFLINE is set"):
        locate_model("org/tiny:Q8_0")
    with FakeHub({"org/tiny": tiny_repo}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE")
        path = pull_model("org/tiny:Q8_0")
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        server.requests.clear()
        assert pull_model("org/tiny:Q8_0") == path and server.requests == []  # offline: the cache answers
        with pytest.raises(ModelLoadError, match="no GGUF for 'Q4_K_M'.*HF_HUB_OFFLINE is set"):
            locate_model("org/tiny:Q4_K_M")


def test_a_cut_connection_resumes_and_the_real_model_loads_from_the_hub_cache(stores, default_gguf, default_model_dir,
                                                                             monkeypatch):
    from llmchat.core.weights.resolve import resolve_model

    with FakeHub({"HuggingFaceTB/SmolLM2-135M-Instruct-GGUF": {SMOL: default_gguf}}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        server.cut_after = 40_000_000  # more than one of the client's 10 MiB chunks, then the connection drops
        path = pull_model("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1")
        gets = [r for r in server.requests if r.startswith("GET /HuggingFaceTB")]
    assert len(gets) == 2 and 0 < int(gets[1].rpartition("bytes=")[2].rstrip("-")) <= 40_000_000  # only the rest
    assert sha256(path) == sha256(default_gguf)
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1").resolve() == default_model_dir.resolve()


def test_a_safetensors_repo_is_a_hugging_face_folder(stores, tiny_model_dir, monkeypatch):
    files = {p.name: p for p in tiny_model_dir.iterdir() if p.is_file()}
    with FakeHub({"org/tiny-hf": files}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        folder = pull_model("org/tiny-hf")
    check_hf_folder(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)
    assert locate_model("org/tiny-hf") == folder


def test_models_lists_what_was_pulled_and_rm_removes_only_that(hub, stores, tiny_repo, tmp_path):
    mine = pull_model("org/tiny:Q4_K_M")
    theirs = pull_model("org/tiny:Q8_0")
    from llmchat.core.weights.owned import forget_pulled

    forget_pulled("org/tiny", ["Tiny-1B-Q8_0.gguf"])  # as if another app had downloaded this one
    listed = json.loads(cli("models", "--json").stdout)["models"]
    rows = {m["name"]: m for m in listed if m["source"] == "huggingface"}
    assert rows["org/tiny:Q4_K_M"]["owner"] == "llmchat" and rows["org/tiny:Q8_0"]["owner"] == "huggingface"
    assert rows["org/tiny:Q4_K_M"]["quantization"] == "Q4_K_M" and rows["org/tiny:Q8_0"]["quantization"] == "Q8_0"
    assert rows["org/tiny:Q4_K_M"]["size_bytes"] == mine.stat().st_size and rows["org/tiny:Q4_K_M"]["num_params"] == 48
    assert rows["org/tiny:Q4_K_M"]["architecture"] == "llama" and rows["org/tiny:Q4_K_M"]["context_length"] == 4096
    text = cli("models").stdout
    assert "org/tiny:Q4_K_M" in text and "Q8_0" in text and str(stores["hf"]) in text

    refused = cli("rm", "org/tiny:Q8_0")
    assert refused.returncode == 2 and "downloaded by another app" in refused.stderr and theirs.is_file()
    blob = mine.resolve()
    done = cli("rm", "org/tiny:Q4_K_M")
    assert done.returncode == 0 and "removed org/tiny:Q4_K_M" in done.stdout, done.stderr
    assert not mine.exists() and not blob.exists() and theirs.is_file()  # pointer and blob gone, the other kept
    again = cli("rm", "org/tiny:Q4_K_M")
    assert again.returncode == 2 and "no GGUF for 'Q4_K_M'" in again.stderr
