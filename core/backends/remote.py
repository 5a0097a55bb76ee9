"""RemoteBackend: the engine protocol (core/api/protocol.py) spoken to any OpenAI-compatible server (vLLM,
SGLang, llama-server, Ollama, llmchat serve) over HTTP, with httpx.

Each request streams on its own thread (`POST /v1/chat/completions`, SSE, usage included). What can be
known is reported and nothing is made up: TTFT and TPOT are measured here (from the submit and from each
streamed chunk, one clock: time.perf_counter); prompt and cached tokens come from the server's `usage`
(0 when it does not send them); queue/KV/prefix-cache figures from its `/metrics` when it is a
vLLM/SGLang/llmchat server (core/backends/remote_stats.py), None otherwise. Token ids are not known: Started and
TextDelta carry none, so a conversation's ids are re-derived by whichever engine runs its next turn.
A server's separate reasoning (`reasoning_content`, vLLM/DeepSeek style) comes back as `<think>…</think>` text,
as the in-process engine streams it, so the app shows the same reasoning block.
A connection error, a timeout, a 4xx/5xx or a server dying mid-stream ends that request with one
Finished(ERROR) line; the text received so far is kept in it.
"""
from __future__ import annotations

import itertools
import json
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import httpx

from ..api.events import Finished, Started, TextDelta
from ..api.metrics import EngineStats, LiveRequest, RequestMetrics, StatsWindow
from ..api.model_facts import ModelFacts
from ..api.protocol import BackendInfo, Sink
from ..text.reasoning import ReasoningTagger
from .remote_stats import ServerFigures, parse_server_metrics
from ..api.events import FinishReason

METRICS_EVERY_S = 1.0
TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=30.0)  # read: a long prefill on a busy server


class RemoteError(ValueError):
    """The server could not be used (unreachable, refused, not OpenAI-compatible): one line with the remedy."""


@dataclass(slots=True)
class RemoteHandle:
    handle_id: int
    request_id: int | None = None
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    last_token: float | None = None
    num_chunks: int = 0
    cancelled: threading.Event = field(default_factory=threading.Event)
    response: httpx.Response | None = None


def describe(error: BaseException, url: str) -> str:
    """One line for what went wrong talking to the server."""
    if isinstance(error, httpx.ConnectError):
        return f"cannot reach the server at {url} ({error}); is it running?"
    if isinstance(error, httpx.TimeoutException):
        return f"the server at {url} did not answer in time ({type(error).__name__})"
    if isinstance(error, (httpx.RemoteProtocolError, httpx.ReadError)):
        return f"the server at {url} closed the connection mid-reply ({error or type(error).__name__})"
    return f"{type(error).__name__}: {error}"


def error_of(response: httpx.Response) -> str:
    """The server's own error message of a 4xx/5xx, in one line."""
    try:
        body = response.json()
        message = body.get("error", body) if isinstance(body, dict) else body
        message = message.get("message", message) if isinstance(message, dict) else message
    except (ValueError, UnicodeDecodeError):
        message = response.text[:200]
    text = " ".join(str(message).split()) or response.reason_phrase
    return f"the server answered {response.status_code}: {text}"


class RemoteBackend:
    def __init__(self, base_url: str, sink: Sink, api_key: str | None = None, model: str | None = None,
                 timeout: httpx.Timeout = TIMEOUT, poll_metrics: bool = True) -> None:
        start = time.perf_counter()
        root = base_url.rstrip("/").removesuffix("/v1")
        if not root.startswith(("http://", "https://")):
            raise RemoteError(f"--backend {base_url!r}: give a URL such as http://127.0.0.1:8000/v1")
        self.url, self.sink = root, sink
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=root, headers=headers, timeout=timeout,
                                   limits=httpx.Limits(max_connections=64, max_keepalive_connections=16))
        self.model, context_length = self._discover(model)
        facts = ModelFacts(self.model, context_length=context_length or None)  # all a server's /v1/models says
        self._info = BackendInfo(self.model, context_length, f"remote {root}", "—", None, time.perf_counter() - start,
                                 facts=facts)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._in_flight: dict[int, RemoteHandle] = {}
        self._threads: list[threading.Thread] = []
        self._window = StatsWindow()
        self._figures = ServerFigures()
        self._stopped = threading.Event()
        if poll_metrics:
            threading.Thread(target=self._poll_metrics, name="llmchat-remote-metrics", daemon=True).start()

    def _discover(self, model: str | None) -> tuple[str, int]:
        """The model to ask for (the server's first unless named) and its context, if the server says."""
        try:
            response = self.client.get("/v1/models")
        except httpx.HTTPError as e:
            raise RemoteError(describe(e, self.url)) from None
        if response.status_code >= 400:
            raise RemoteError(f"{self.url}/v1/models: {error_of(response)}")
        try:
            listed = [m for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
        except (ValueError, AttributeError):
            raise RemoteError(f"{self.url}/v1/models did not answer OpenAI JSON; "
                              "is it an OpenAI-compatible server?") from None
        chosen = next((m for m in listed if m["id"] == model), None) if model else (listed[0] if listed else None)
        if chosen is None and model is None:
            raise RemoteError(f"{self.url} lists no model; name one with --model")
        context = (chosen or {}).get("max_model_len") or (chosen or {}).get("context_length") or 0
        return (model or chosen["id"]), int(context) if isinstance(context, (int, float)) else 0

    # -- the protocol -----------------------------------------------------------------------
    def submit(self, conversation_id, prompt, params) -> RemoteHandle:
        if self._stopped.is_set():
            raise RuntimeError("the backend is shut down")
        return self.submit_messages(list(prompt.messages), params)  # (the server tokenizes: ids are not sent)

    def submit_messages(self, messages: list[dict], params) -> RemoteHandle:
        """A streamed chat completion of `messages` with the sampling params the server understands."""
        body = {"model": self.model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, "max_tokens": params.max_tokens,
                "temperature": params.temperature, "top_p": params.top_p}
        body.update({k: v for k, v in (("seed", params.seed), ("top_k", params.top_k)) if v})
        if params.stop:
            body["stop"] = list(params.stop)
        handle = RemoteHandle(next(self._ids))
        handle.request_id = handle.handle_id
        with self._lock:
            self._in_flight[handle.handle_id] = handle
        thread = threading.Thread(target=self._run, args=(handle, body), name="llmchat-remote", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return handle

    def cancel(self, handle: RemoteHandle) -> bool:
        with self._lock:
            if handle.handle_id not in self._in_flight:
                return False
            handle.cancelled.set()
            response = handle.response
        if response is not None:
            response.close()  # the stream's thread sees the connection end and finishes with reason abort
        return True

    def stats(self) -> EngineStats:
        f = self._figures
        with self._lock:
            live = tuple(self._live(h) for h in self._in_flight.values())
            recent_ttft, recent_tpot = tuple(self._window.ttft), tuple(self._window.tpot)
        num_local = len(live)
        return EngineStats(
            f.num_blocks_total, f.num_blocks_used, f.num_blocks_cached_free, f.num_blocks_free, f.block_size,
            f.kv_bytes_per_token, f.num_running if f.num_running is not None else num_local, f.num_waiting or 0,
            f.prefix_cache_hit_rate if f.prefix_cache_hit_rate is not None else float("nan"),
            recent_ttft, recent_tpot,
            f.decode_tokens_per_s if f.decode_tokens_per_s is not None else float("nan"), float("nan"),
            f.num_preemptions or 0, live,
        )

    @staticmethod
    def _live(h: RemoteHandle) -> LiveRequest:
        ttft = h.first_token - h.submitted if h.first_token is not None else float("nan")
        tpot = ((h.last_token - h.first_token) / (h.num_chunks - 1) if h.num_chunks > 1 else float("nan"))
        return LiveRequest(h.request_id, h.first_token is None, 0, 0, 0, h.num_chunks, ttft, tpot, 0)

    def residency(self) -> Future:
        future: Future = Future()
        future.set_result({})  # which KV blocks hold what is the server's business
        return future

    def info(self) -> BackendInfo:
        return self._info

    def shutdown(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        with self._lock:
            handles = list(self._in_flight.values())
        for handle in handles:
            self.cancel(handle)
        for thread in self._threads:
            thread.join(timeout)
        self.client.close()

    # -- one request's thread ---------------------------------------------------------------
    def _run(self, handle: RemoteHandle, body: dict) -> None:
        parts: list[str] = []
        usage: dict = {}
        reason, error = FinishReason.STOP, None
        try:
            with self.client.stream("POST", "/v1/chat/completions", json=body) as response:
                with self._lock:
                    handle.response = response
                if response.status_code >= 400:
                    response.read()
                    reason, error = FinishReason.ERROR, error_of(response)
                else:
                    self.sink(handle, Started(handle.request_id, (), 0))
                    reason, error, usage = self._read_stream(handle, response, parts)
        except Exception as e:  # noqa: BLE001 - this request ends, the app goes on
            if handle.cancelled.is_set():  # cancel() closed the connection under the reader
                reason, error = FinishReason.ABORT, None
            elif isinstance(e, httpx.HTTPError):
                reason, error = FinishReason.ERROR, describe(e, self.url)
            else:  # a reply that is not the SSE/JSON it should be
                reason, error = FinishReason.ERROR, f"unreadable reply from {self.url}: {type(e).__name__}: {e}"
        finally:
            with self._lock:
                self._in_flight.pop(handle.handle_id, None)
                handle.response = None
            metrics = self._metrics(handle, usage)
            if reason is not FinishReason.ERROR or parts:
                with self._lock:
                    self._window.add_request(metrics)
            self.sink(handle, Finished(handle.request_id, reason, metrics, (), "".join(parts), error))

    def _read_stream(self, handle: RemoteHandle, response: httpx.Response, parts: list[str]):
        reason, usage = None, {}
        tagger = ReasoningTagger()  # a server's reasoning_content back into <think> text, as a local reply streams
        for line in response.iter_lines():
            if handle.cancelled.is_set():
                return FinishReason.ABORT, None, usage
            if not line.startswith("data:"):
                continue  # SSE comments, event names, blank separators
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if isinstance(chunk, dict) and chunk.get("error"):
                error = chunk["error"]
                message = error.get("message", error) if isinstance(error, dict) else error
                return FinishReason.ERROR, f"the server reported: {message}", usage
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""  # (newer vLLM: reasoning)
                text = tagger.tagged(reasoning, delta.get("content") or choice.get("text") or "")
                if text:
                    t = time.perf_counter()
                    handle.first_token = handle.first_token or t
                    handle.last_token, handle.num_chunks = t, handle.num_chunks + 1
                    parts.append(text)
                    self.sink(handle, TextDelta(handle.request_id, text, ()))
                reason = choice.get("finish_reason") or reason
        if handle.cancelled.is_set():
            return FinishReason.ABORT, None, usage
        if reason is None:
            return FinishReason.ERROR, f"the server at {self.url} ended the stream without finishing the reply", usage
        return (FinishReason.LENGTH if reason == "length" else FinishReason.STOP), None, usage

    def _metrics(self, h: RemoteHandle, usage: dict) -> RequestMetrics:
        num_output = usage.get("completion_tokens") or h.num_chunks
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        ttft = h.first_token - h.submitted if h.first_token is not None else float("nan")
        tpot = (h.last_token - h.first_token) / (num_output - 1) if h.first_token is not None and num_output > 1 \
            else float("nan")
        return RequestMetrics(usage.get("prompt_tokens") or 0, cached, num_output, float("nan"), ttft, tpot)

    # -- the server's /metrics --------------------------------------------------------------
    def _poll_metrics(self) -> None:
        """Every second while up; stops asking if the server has no Prometheus /metrics."""
        delay = 0.0
        while not self._stopped.wait(delay):
            delay = METRICS_EVERY_S
            try:
                response = self.client.get("/metrics", timeout=5.0)
                if response.status_code >= 400:
                    return
                self._figures = parse_server_metrics(response.text)
            except httpx.HTTPError:
                continue  # the server is down or busy: try again at the next tick
            except ValueError:
                return  # not Prometheus text
            if self._figures.engine is None:
                return
