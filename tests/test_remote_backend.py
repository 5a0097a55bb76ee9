"""The remote backend (core/backends/remote.py) against a real `llmchat serve` subprocess: it speaks the
engine protocol, measures what it can, reads the server's /metrics, and turns every failure (the server
killed mid-stream, unreachable, a 4xx) into one Finished with the text so far."""
from __future__ import annotations

import subprocess
import threading
import time

import openai
import pytest

from llmchat.core.chats.conversation import Conversation
from llmchat.core.api.events import Finished, Started, TextDelta
from llmchat.core.backends.remote import RemoteBackend, RemoteError
from llmchat.core.backends.remote_stats import parse_server_metrics
from llmchat.core.api.params import SamplingParams
from llmchat.core.api.events import FinishReason
from llmchat.core.serve.metrics import ServeMetrics
from llmchat.core.api.metrics import EngineStats

from serve_helpers import Server, llmchat_exe


class Collector:
    """A sink that keeps every event per handle and can wake a test on the first text."""

    def __init__(self) -> None:
        self.events: dict[int, list] = {}
        self.first_text = threading.Event()
        self.done = threading.Event()

    def __call__(self, handle, event) -> None:
        self.events.setdefault(handle.handle_id, []).append(event)
        if isinstance(event, TextDelta):
            self.first_text.set()
        if isinstance(event, Finished):
            self.done.set()

    def finished(self, handle, timeout: float = 60) -> Finished:
        deadline = time.monotonic() + timeout
        while not any(isinstance(e, Finished) for e in self.events.get(handle.handle_id, ())):
            assert time.monotonic() < deadline, self.events
            time.sleep(0.02)
        return self.events[handle.handle_id][-1]


def ask(conversation: Conversation, text: str) -> None:
    conversation.start_turn(text)


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    server = Server("--model", str(tiny_model_dir), "--kv-cache-gb", "0.01")
    yield server
    server.stop()


def test_a_remote_chat_streams_events_in_order_and_reports_what_the_server_says(server):
    sink = Collector()
    backend = RemoteBackend(server.url, sink)
    try:
        info = backend.info()
        assert info.model_name == "tiny-llama" and info.context_length == 1024 and info.kv_bytes_per_token is None
        chat = Conversation(1)
        chat.settings.temperature = 0.0
        ask(chat, "Tell me about the sea. " * 6)
        params = SamplingParams(temperature=0, max_tokens=20)
        handle = backend.submit(1, chat.prompt(), params)
        finished = sink.finished(handle)
        events = sink.events[handle.handle_id]
        assert isinstance(events[0], Started) and events[0].prompt_ids == ()  # ids are the server's business
        deltas = [e for e in events if isinstance(e, TextDelta)]
        assert finished.reason in (FinishReason.STOP, FinishReason.LENGTH) and finished.error is None
        assert finished.text == "".join(d.text for d in deltas) and finished.output_ids == ()
        m = finished.metrics
        assert m.num_prompt_tokens > 30 and m.num_output_tokens == len(deltas) and 0 < m.ttft < 30
        reference = openai.OpenAI(base_url=server.url, api_key="-").chat.completions.create(
            model="tiny-llama", messages=chat.template_messages(), temperature=0, max_tokens=20)
        assert reference.choices[0].message.content == finished.text  # the same request, the same greedy reply
        # the next turn resends the conversation: the server's prefix cache answers for the first turn
        chat.messages[-1].content, chat.messages[-1].status = finished.text, "done"
        ask(chat, "More.")
        second = sink.finished(backend.submit(1, chat.prompt(), params))
        assert second.metrics.num_cached_tokens >= m.num_prompt_tokens // 16 * 16
        # the llmchat server's /metrics fill the KV and queue figures
        deadline = time.monotonic() + 10
        # (NaN until a scrape after the requests; a scrape taken while the second one ran shows it running)
        while not ((s := backend.stats()).prefix_cache_hit_rate > 0 and s.num_running == 0):
            assert time.monotonic() < deadline, "no figures from /metrics"
            time.sleep(0.1)
        stats = backend.stats()
        assert stats.num_blocks_total == server.metrics()["llmchat:kv_blocks_total"]
        assert stats.num_blocks_used == 0 and stats.num_running == 0 and 0 < stats.prefix_cache_hit_rate < 1
        assert stats.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 KV heads of 16, fp32
        assert stats.recent_ttft == (m.ttft, second.metrics.ttft)
        assert backend.residency().result() == {}
    finally:
        backend.shutdown()


def test_cancel_ends_the_request_here_and_on_the_server(server):
    sink = Collector()
    backend = RemoteBackend(server.url, sink, poll_metrics=False)
    try:
        chat = Conversation(1)
        ask(chat, "Go on")
        handle = backend.submit(1, chat.prompt(), SamplingParams(max_tokens=900, temperature=1.0))
        assert sink.first_text.wait(30)
        assert backend.cancel(handle)
        finished = sink.finished(handle)
        assert finished.reason is FinishReason.ABORT and finished.error is None
        assert finished.text == "".join(e.text for e in sink.events[handle.handle_id] if isinstance(e, TextDelta))
        server.wait_metric("vllm:num_requests_running", lambda v: v == 0)
        assert not backend.cancel(handle)  # no longer in flight
    finally:
        backend.shutdown()


def test_a_server_killed_mid_stream_is_one_error_and_the_text_so_far_is_kept(tiny_model_dir):
    doomed = Server("--model", str(tiny_model_dir), "--kv-cache-gb", "0.01")
    sink = Collector()
    backend = RemoteBackend(doomed.url, sink, poll_metrics=False)
    try:
        chat = Conversation(1)
        ask(chat, "Go on")
        handle = backend.submit(1, chat.prompt(), SamplingParams(max_tokens=1000, temperature=1.0))
        assert sink.first_text.wait(30)
        doomed.kill()
        finished = sink.finished(handle)
        received = "".join(e.text for e in sink.events[handle.handle_id] if isinstance(e, TextDelta))
        assert finished.reason is FinishReason.ERROR and finished.text == received and received
        assert "closed the connection mid-reply" in finished.error and "\n" not in finished.error
        # the backend lives on: the next request says the server is gone, in one line, and nothing started
        again = sink.finished(backend.submit(1, chat.prompt(), SamplingParams(max_tokens=5)))
        assert again.reason is FinishReason.ERROR and again.text == "" and "cannot reach the server" in again.error
        assert not any(isinstance(e, Started) for e in sink.events[2])
    finally:
        backend.shutdown()
        doomed.kill()


def test_a_4xx_is_the_servers_own_message(server):
    sink = Collector()
    backend = RemoteBackend(server.url, sink, poll_metrics=False)
    try:
        chat = Conversation(1)
        ask(chat, "word " * 2000)
        finished = sink.finished(backend.submit(1, chat.prompt(), SamplingParams(max_tokens=5)))
        assert finished.reason is FinishReason.ERROR and finished.text == ""
        assert finished.error.startswith("the server answered 400: the prompt has") and "context" in finished.error
    finally:
        backend.shutdown()


def test_an_unreachable_or_wrong_server_is_one_line_at_start():
    with pytest.raises(RemoteError, match="cannot reach the server at http://127.0.0.1:9"):
        RemoteBackend("http://127.0.0.1:9/v1", lambda h, e: None)
    with pytest.raises(RemoteError, match="give a URL"):
        RemoteBackend("localhost:8000", lambda h, e: None)


def test_ask_backend_streams_the_servers_reply(server):
    question = "Tell me a story"
    reference = openai.OpenAI(base_url=server.url, api_key="-").chat.completions.create(
        model="tiny-llama", messages=[{"role": "user", "content": question}], temperature=0, max_tokens=15)
    done = subprocess.run([llmchat_exe(), "ask", "--backend", server.url, "--temperature", "0", "--max-tokens", "15",
                           "--raw", "--stats", question], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == reference.choices[0].message.content + "\n"
    assert f"output {reference.usage.completion_tokens} tokens" in done.stderr


# --------------------------------------------------------------------------------------- reading /metrics
VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 400.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",enable_prefix_caching="True"} 1.0
"""
SGLANG = """sglang:num_running_reqs{model_name="m"} 2.0
sglang:num_queue_reqs{model_name="m"} 0.0
sglang:cache_hit_rate{model_name="m"} 0.5
sglang:gen_throughput{model_name="m"} 123.0
"""


def test_server_metrics_are_read_per_engine():
    v = parse_server_metrics(VLLM)
    assert (v.engine, v.num_running, v.num_waiting, v.prefix_cache_hit_rate) == ("vllm", 3, 1, 0.25)
    assert (v.num_blocks_total, v.num_blocks_used, v.num_blocks_free, v.num_blocks_cached_free, v.block_size) == \
        (1000, 250, 750, None, 16)  # vLLM does not tell cached blocks from empty ones
    s = parse_server_metrics(SGLANG)
    assert (s.engine, s.num_running, s.prefix_cache_hit_rate, s.num_blocks_total) == ("sglang", 2, 0.5, None)
    assert parse_server_metrics("# just a comment\nup 1\n").engine is None


def test_our_own_metrics_read_back_as_what_the_engine_said():
    stats = EngineStats(512, 40, 100, 372, 16, 1000, 2, 3, 0.5, (), (), 10.0, 1.0)
    ours = parse_server_metrics(ServeMetrics("m", lambda: stats).text().decode())
    assert ours.engine == "llmchat"
    assert (ours.num_blocks_total, ours.num_blocks_used, ours.num_blocks_cached_free, ours.num_blocks_free) == \
        (512, 40, 100, 372)
    assert (ours.num_running, ours.num_waiting, ours.block_size, ours.decode_tokens_per_s) == (2, 3, 16, 10.0)
    assert ours.kv_bytes_per_token == 1000
