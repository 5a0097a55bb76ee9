"""Conventions users bring from peers: `--backend openai` / `--backend` alone take OPENAI_BASE_URL, `--backend
ollama` Ollama's address from OLLAMA_HOST (never silently without the flag), LLMCHAT_DATA_DIR, -m and -s."""
from __future__ import annotations

import pytest

from llmchat.core.chats.store import default_data_dir
from llmchat.tui.commands.backend_arg import backend_url, ollama_url
from llmchat.tui.commands.cli import build_parser


@pytest.mark.parametrize("host, url", [
    (None, "http://127.0.0.1:11434/v1"), ("", "http://127.0.0.1:11434/v1"),
    ("0.0.0.0", "http://127.0.0.1:11434/v1"), ("gpu-box", "http://gpu-box:11434/v1"),
    ("gpu-box:8080", "http://gpu-box:8080/v1"), (":9000", "http://127.0.0.1:9000/v1"),
    ("https://ollama.example.com", "https://ollama.example.com:443/v1"),
    ("http://10.0.0.2:11434/", "http://10.0.0.2:11434/v1"),
])
def test_ollama_host_becomes_its_openai_compatible_address(host, url):
    assert ollama_url(host) == url


def test_backend_names_and_their_variables(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OLLAMA_HOST", "box:1234")
    with pytest.raises(ValueError, match="OPENAI_BASE_URL, which is not set"):
        backend_url("openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://vllm:8000/v1")
    assert backend_url("openai") == "http://vllm:8000/v1" and backend_url("ollama") == "http://box:1234/v1"
    assert backend_url("http://x/v1") == "http://x/v1" and backend_url(None) is None
    args = build_parser().parse_args(["--backend"])
    assert args.backend == "openai"  # the flag alone: OPENAI_BASE_URL
    assert build_parser().parse_args([]).backend is None  # no flag: no variable is read
    ask = build_parser().parse_args(["ask", "-m", "org/repo:Q4_K_M", "-s", "Be terse.", "hi"])
    assert (ask.model, ask.system, ask.question) == ("org/repo:Q4_K_M", "Be terse.", "hi")


def test_llmchat_data_dir_overrides_the_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMCHAT_DATA_DIR", str(tmp_path / "chats"))
    assert default_data_dir() == tmp_path / "chats"
    monkeypatch.delenv("LLMCHAT_DATA_DIR")
    assert default_data_dir() != tmp_path / "chats"
