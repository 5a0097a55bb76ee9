"""`--backend URL | openai | ollama`: the server a chat goes to, with the addresses peers' users already set.

`--backend openai` (or `--backend` alone) is $OPENAI_BASE_URL (its key: $OPENAI_API_KEY, read by the remote
backend); `--backend ollama` is Ollama's OpenAI-compatible address, from $OLLAMA_HOST (default
127.0.0.1:11434). Neither variable is used unless the flag is given.
"""
from __future__ import annotations

import os

OLLAMA_DEFAULT = "127.0.0.1:11434"


def ollama_url(host: str | None) -> str:
    """OLLAMA_HOST ("host", "host:port", ":port", "http://host:port") -> Ollama's /v1 address."""
    host = (host or "").strip() or OLLAMA_DEFAULT
    scheme, sep, rest = host.partition("://")
    if not sep:
        scheme, rest = "http", host
    rest = rest.rstrip("/")
    name, colon, port = rest.rpartition(":") if ":" in rest.split("]")[-1] else (rest, "", "")
    name = name or "127.0.0.1"
    if name == "0.0.0.0":  # the server's "all interfaces"; a client reaches it locally
        name = "127.0.0.1"
    return f"{scheme}://{name}:{port or (443 if scheme == 'https' else 11434)}/v1"


def backend_url(value: str | None) -> str | None:
    """The URL --backend names; ValueError (one line) when `openai` is asked for and OPENAI_BASE_URL is unset."""
    if value is None:
        return None
    if value == "openai":
        url = os.environ.get("OPENAI_BASE_URL", "").strip()
        if not url:
            raise ValueError("--backend openai takes its address from OPENAI_BASE_URL, which is not set: set it "
                             "(e.g. http://localhost:8000/v1) or pass --backend URL")
        return url
    if value == "ollama":
        return ollama_url(os.environ.get("OLLAMA_HOST"))
    return value
