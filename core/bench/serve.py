"""`llmchat bench serve`: N concurrent streaming clients against an OpenAI-compatible server on loopback.

By default a `llmchat serve` subprocess on a free port with the bench's model flags; `--url` measures any
other server (vLLM, SGLang, llama-server) the same way. Each client sends `rounds` chat requests one after
the other (distinct user messages after the model's default system prompt, fixed output length through
`ignore_eos`), streaming. Measured here, client-side, one clock (time.perf_counter): TTFT per request
(request sent -> first text chunk), aggregate output tokens/s (all clients' completion tokens / wall
time of the run), errors (any non-200, error event or short stream). Client counts are interleaved per
repeat so a noisy machine hurts them alike; medians over repeats are reported.
"""
from __future__ import annotations

import asyncio
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from .bench import WORDS, Results


@dataclass(frozen=True, slots=True)
class ServeBenchSize:
    clients: tuple[int, ...]
    rounds: int  # requests per client, one after the other
    max_tokens: int
    message_words: int
    repeats: int


SERVE_FULL = ServeBenchSize((1, 4, 16), 3, 32, 40, 3)
SERVE_QUICK = ServeBenchSize((1, 2), 1, 4, 8, 1)


@dataclass(slots=True)
class Sample:
    ttft: float = float("nan")
    num_tokens: int = 0
    error: str | None = None


def message(salt: int, num_words: int) -> str:
    return f"Request {salt}: " + " ".join(WORDS[(salt * 7 + i) % len(WORDS)] for i in range(num_words))


async def one_request(http: httpx.AsyncClient, model: str, text: str, max_tokens: int) -> Sample:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": True, "temperature": 0,
            "max_tokens": max_tokens, "ignore_eos": True, "stream_options": {"include_usage": True}}
    sample, start = Sample(), time.perf_counter()
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                return Sample(error=f"HTTP {response.status_code}")
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line.endswith("[DONE]"):
                    continue
                chunk = json.loads(line[5:])
                if chunk.get("error"):
                    return Sample(error=str(chunk["error"]))
                if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()):
                    sample.ttft = sample.ttft if sample.ttft == sample.ttft else time.perf_counter() - start
                sample.num_tokens = (chunk.get("usage") or {}).get("completion_tokens", sample.num_tokens)
    except httpx.HTTPError as e:
        return Sample(error=f"{type(e).__name__}: {e}")
    if sample.num_tokens != max_tokens:
        sample.error = f"{sample.num_tokens} tokens instead of {max_tokens}"
    return sample


async def run_clients(url: str, model: str, num_clients: int, size: ServeBenchSize, salt: int):
    """(samples, wall seconds) of num_clients clients each sending size.rounds requests in turn."""
    async def client(i: int) -> list[Sample]:
        return [await one_request(http, model, message(salt + i * size.rounds + r, size.message_words),
                                  size.max_tokens) for r in range(size.rounds)]

    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=num_clients)) as http:
        start = time.perf_counter()
        per_client = await asyncio.gather(*(client(i) for i in range(num_clients)))
        return [s for samples in per_client for s in samples], time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))] if values else float("nan")


def bench_serve(url: str, size: ServeBenchSize, results: Results, log: Callable[[str], None]) -> None:
    root = url.rstrip("/").removesuffix("/v1")
    model = httpx.get(root + "/v1/models", timeout=30).json()["data"][0]["id"]
    rates: dict[int, list[float]] = {n: [] for n in size.clients}
    ttfts: dict[int, list[float]] = {n: [] for n in size.clients}
    errors: dict[int, int] = dict.fromkeys(size.clients, 0)
    salt = int(time.time())  # fresh messages each run: no reply is served from a previous run's cache
    for repeat in range(size.repeats):
        for n in size.clients:
            samples, wall = asyncio.run(run_clients(root, model, n, size, salt))
            salt += n * size.rounds
            errors[n] += sum(1 for s in samples if s.error)
            rates[n].append(sum(s.num_tokens for s in samples) / wall)
            ttfts[n] += [s.ttft for s in samples if not s.error]
            log(f"serve: {n} client(s), repeat {repeat + 1}: {rates[n][-1]:.1f} tok/s, "
                f"{errors[n]} error(s) so far")
    for n in size.clients:
        variant = f"{n} client" + ("s" if n > 1 else "")
        results.add("serve", variant, "output tok/s (all)", rates[n], "tok/s")
        results.add("serve", variant, "vs 1 client", [statistics.median(rates[n]) / statistics.median(rates[1])]
                    if 1 in rates else [float("nan")], "x")
        results.add("serve", variant, "TTFT p50", [percentile(ttfts[n], 0.5) * 1000], "ms")
        results.add("serve", variant, "TTFT p99", [percentile(ttfts[n], 0.99) * 1000], "ms")
        results.add("serve", variant, "errors", [errors[n]], "requests")


def spawn_server(flags: list[str], log: Callable[[str], None]) -> tuple[subprocess.Popen, str]:
    """`llmchat serve --port 0 FLAGS` in a subprocess; (process, its base URL) once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "llmchat.tui.commands.cli", "serve", "--port", "0", *flags],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        log(line.rstrip())
        match = re.search(r"on (http://[^ ]+)/v1", line)
        if match:
            threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()  # never let it block
            return proc, match.group(1)
    raise ValueError(f"llmchat serve exited with status {proc.wait()} before listening")
