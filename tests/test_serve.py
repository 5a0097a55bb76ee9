"""`llmchat serve` as a user runs it: a subprocess on a free loopback port, driven by the official `openai`
client. The real model answers the France question (slow tests); a tiny random model (an ordinary model
folder) shows the protocol, the prefix cache across requests, /metrics, cancel on disconnect and bad input.
"""
from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from serve_helpers import Server

QUESTION = "What is the capital of France? Answer in one sentence."
GREEDY = {"temperature": 0, "max_tokens": 40}


@pytest.fixture(scope="module")
def tiny_server(tiny_model_dir):
    # no disk tier: these tests count in-memory reuse exactly (another module's server may have stored the same
    # prompts' blocks in this run's cache dir); the disk tier has its own test below
    server = Server("--model", str(tiny_model_dir), "--kv-cache-gb", "0.01", "--max-num-seqs", "8",
                    "--max-pending", "64", "--no-kv-disk")
    yield server
    assert server.stop() == 0, "".join(server.log)


@pytest.fixture
def client(tiny_server):
    with openai.OpenAI(base_url=tiny_server.url, api_key="unused", max_retries=0, timeout=60) as c:
        yield c


# ------------------------------------------------------------------------------------------- the real model
@pytest.mark.slow
def test_real_model_answers_paris_streamed_and_whole_and_reuses_the_prefix(default_model_dir):
    server = Server()
    try:
        c = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
        messages = [{"role": "user", "content": QUESTION}]
        whole = c.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, **GREEDY)
        answer = whole.choices[0].message.content
        assert "Paris" in answer and whole.choices[0].finish_reason == "stop"
        chunks = list(c.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, stream=True,
                                                stream_options={"include_usage": True}, **GREEDY))
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == answer  # greedy: same
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
        assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 16  # the same prompt again: its full blocks

        before = server.metrics()
        follow = messages + [{"role": "assistant", "content": answer}, {"role": "user", "content": "And of Italy?"}]
        second = c.chat.completions.create(model="SmolLM2-135M-Instruct", messages=follow, **GREEDY)
        cached, prompt = second.usage.prompt_tokens_details.cached_tokens, second.usage.prompt_tokens
        assert cached >= whole.usage.prompt_tokens - 16 and cached < prompt  # the first turn, reply included
        after = server.metrics()
        assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] == cached
        assert after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"] == prompt
    finally:
        assert server.stop() == 0


# -------------------------------------------------------------------------------------------- the protocol
def test_chat_whole_and_streamed_agree_and_say_their_usage(client, tiny_server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    whole = client.chat.completions.create(model="tiny-llama", messages=messages, temperature=0, max_tokens=12)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens <= 12 and whole.usage.prompt_tokens > 5
    stream = client.chat.completions.create(model="tiny-llama", messages=messages, temperature=0, max_tokens=12,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # same prompt again: every full block of it came from the cache
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == whole.usage.prompt_tokens // 16 * 16


def test_completions_models_and_seeded_sampling(client):
    assert [m.id for m in client.models.list().data] == ["tiny-llama"]
    first = client.completions.create(model="tiny-llama", prompt="Once upon a time", max_tokens=8, seed=7,
                                      temperature=1.0)
    again = client.completions.create(model="tiny-llama", prompt="Once upon a time", max_tokens=8, seed=7,
                                      temperature=1.0)
    assert first.object == "text_completion" and first.choices[0].text == again.choices[0].text
    assert again.usage.prompt_tokens_details.cached_tokens == 0  # 4 tokens: no full block to share


def test_a_resent_conversation_hits_the_cache_and_metrics_count_it(client, tiny_server):
    messages = [{"role": "user", "content": "Tell me about the sea. " * 6}]
    first = client.chat.completions.create(model="tiny-llama", messages=messages, temperature=0, max_tokens=20)
    before = tiny_server.metrics()
    follow = messages + [{"role": "assistant", "content": first.choices[0].message.content},
                         {"role": "user", "content": "More."}]
    second = client.chat.completions.create(model="tiny-llama", messages=follow, temperature=0, max_tokens=5)
    seen = first.usage.prompt_tokens + first.usage.completion_tokens  # the exact ids of turn 1, reply included
    assert second.usage.prompt_tokens_details.cached_tokens == seen // 16 * 16
    after = tiny_server.metrics()
    assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] == seen // 16 * 16
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == second.usage.prompt_tokens
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 5
    assert after["vllm:time_to_first_token_seconds_count"] - before["vllm:time_to_first_token_seconds_count"] == 1
    assert after["vllm:request_success_total{finished_reason=length}"] - \
        before.get("vllm:request_success_total{finished_reason=length}", 0) == 1
    assert after["llmchat:kv_blocks_used"] == 0 and after["llmchat:kv_blocks_cached_free"] > 0


def test_a_client_gone_mid_stream_frees_its_request_and_blocks(client, tiny_server):
    aborted = tiny_server.metrics().get("vllm:request_success_total{finished_reason=abort}", 0)
    stream = client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "Go on"}],
                                            max_tokens=900, stream=True, extra_body={"ignore_eos": True})
    for _, chunk in zip(range(5), stream):
        pass
    assert tiny_server.metrics()["vllm:num_requests_running"] == 1
    stream.close()
    tiny_server.wait_metric("vllm:num_requests_running", lambda v: v == 0)
    tiny_server.wait_metric("vllm:request_success_total{finished_reason=abort}", lambda v: v == aborted + 1)
    assert tiny_server.metrics()["llmchat:kv_blocks_used"] == 0


def test_a_client_gone_while_waiting_for_a_whole_reply_frees_it_too(tiny_server):
    aborted = tiny_server.metrics().get("vllm:request_success_total{finished_reason=abort}", 0)
    body = {"messages": [{"role": "user", "content": "Go on"}], "max_tokens": 900, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(tiny_server.url + "/chat/completions", json=body, timeout=0.5)
    tiny_server.wait_metric("vllm:request_success_total{finished_reason=abort}", lambda v: v == aborted + 1)
    tiny_server.wait_metric("vllm:num_requests_running", lambda v: v == 0)
    assert tiny_server.metrics()["llmchat:kv_blocks_used"] == 0


# -------------------------------------------------------------------------------------------- bad input
BAD = [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    ("\xff\xfe".encode("latin-1") + b'{"messages": []}', 400, "UTF-8"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "frobnicate": 1}).encode(), 400, "unknown field"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**12}).encode(), 400, "max_tokens"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}).encode(), 400, "max_tokens"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}).encode(), 400, "temperature"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "n": 3}).encode(), 400, "not supported"),
    (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(), 400, "role"),
    (json.dumps({"messages": []}).encode(), 400, "messages"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}], "model": "gpt-9"}).encode(), 404, "tiny-llama"),
    (json.dumps({"messages": [{"role": "user", "content": "word " * 2000}]}).encode(), 400, "context"),
    (json.dumps({"messages": [{"role": "user", "content": "word " * 2000}], "stream": True}).encode(), 400, "context"),
]


@pytest.mark.parametrize("body,status,says", BAD, ids=[b[2] + str(i) for i, b in enumerate(BAD)])
def test_bad_input_is_a_json_error_saying_why(tiny_server, body, status, says):
    response = httpx.post(tiny_server.url + "/chat/completions", content=body,
                          headers={"content-type": "application/json"}, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert says in error["message"] and error["type"]


def test_unknown_routes_and_methods_are_json_errors(tiny_server):
    assert httpx.get(tiny_server.url + "/nothing").json()["error"]["message"].startswith("GET /v1/nothing")
    assert httpx.get(tiny_server.url + "/chat/completions").status_code == 405


def test_many_concurrent_connections_get_answers_or_429_and_the_server_lives_on(tiny_server, client):
    async def one(http: httpx.AsyncClient, i: int) -> int:
        body = {"messages": [{"role": "user", "content": f"number {i}"}], "max_tokens": 2}
        response = await http.post(tiny_server.url + "/chat/completions", json=body)
        assert response.status_code in (200, 429, 503), response.text  # 503: past --max-connections (256)
        if response.status_code == 200:
            assert response.json()["usage"]["completion_tokens"] <= 2
        else:
            assert "retry later" in response.json()["error"]["message"]
        return response.status_code

    async def many() -> list[int]:
        limits = httpx.Limits(max_connections=1000)
        async with httpx.AsyncClient(limits=limits, timeout=120) as http:
            return await asyncio.gather(*(one(http, i) for i in range(1000)))

    statuses = asyncio.run(many())
    assert statuses.count(200) >= 64  # at least as many as the server admits at once (--max-pending 64)
    assert client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "still up?"}],
                                          max_tokens=3).usage.completion_tokens <= 3
    assert tiny_server.metrics()["vllm:num_requests_waiting"] == 0


def test_an_api_key_is_required_when_set(tiny_model_dir):
    server = Server("--model", str(tiny_model_dir), "--kv-cache-gb", "0.01", "--api-key", "s3cret")
    try:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=server.url, api_key="s3cret", max_retries=0)
        assert good.models.list().data[0].id == "tiny-llama"
        assert httpx.get(server.root + "/health").status_code == 200  # probes need no key
    finally:
        assert server.stop() == 0


def test_a_restarted_server_gets_the_prefix_back_from_the_disk_tier(tiny_model_dir):
    messages = [{"role": "system", "content": "A system prompt no other test uses (its blocks are new)."},
                {"role": "user", "content": "Remember this across a restart. " * 8}]
    flags = ("--model", str(tiny_model_dir), "--kv-cache-gb", "0.01")
    answers = []
    for _ in range(2):
        server = Server(*flags)
        try:
            c = openai.OpenAI(base_url=server.url, api_key="-", max_retries=0)
            answers.append(c.chat.completions.create(model="tiny-llama", messages=messages, temperature=0,
                                                     max_tokens=4))
            disk_hits = server.metrics()["llmchat:prefix_cache_disk_hits_total"]
        finally:
            assert server.stop() == 0  # Ctrl+C: the disk tier's queued writes land first
    first, again = answers
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert again.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens // 16 * 16 == disk_hits
    assert again.choices[0].message.content == first.choices[0].message.content


def test_loopback_is_told_apart():
    from llmchat.tui.commands.serve import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2") and not is_loopback("example.org")


@pytest.mark.slow  # `llmchat bench serve`: a server and its clients, in subprocesses
def test_bench_serve_runs_concurrent_streaming_clients_without_errors(tiny_model_dir, tmp_path):
    import subprocess

    from serve_helpers import llmchat_exe

    out = tmp_path / "serve.jsonl"
    done = subprocess.run([llmchat_exe(), "bench", "serve", "--quick", "--model", str(tiny_model_dir),
                           "--kv-cache-gb", "0.01", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    figures = {(r["variant"], r["metric"]): r["value"] for r in rows}
    assert figures[("1 client", "errors")] == 0 and figures[("2 clients", "errors")] == 0
    assert figures[("2 clients", "output tok/s (all)")] > 0 and figures[("1 client", "TTFT p50")] > 0
    assert "serve       2 clients" in done.stdout
