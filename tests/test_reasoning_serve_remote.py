"""Reasoning (<think>) through `llmchat serve` and the remote backend: the server sends it apart as
`reasoning_content` (whole: message.reasoning_content; streamed: delta.reasoning_content) and `content` without
it, as vLLM and DeepSeek do; the remote backend reads it back into the tagged text the in-process engine streams,
so the app's splitter (core/text/reasoning.py) shows the same block. A scripted engine behind the real
OpenAIServer gives tags split across deltas; a tiny model whose template's generation prompt opens <think>
goes through the real engine (its reply begins inside reasoning)."""
from __future__ import annotations

import json
import shutil
import threading

import openai
import pytest

from llmchat.core.api.events import Finished, TextDelta
from llmchat.core.api.params import SamplingParams
from llmchat.core.api.protocol import ChatPrompt
from llmchat.core.backends.remote import RemoteBackend
from llmchat.core.text.reasoning import ReasoningSplitter, split_reasoning

from serve_helpers import ScriptedEngine, Server, ThreadServer

MESSAGES = [{"role": "user", "content": "What is 2+2?"}]
SPLIT = ["<thi", "nk>Two plus", " two.</th", "ink>\n\nIt is", " 4."]  # both tags cut across deltas


def ask_openai(url: str, model: str, **kw):
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60) as c:
        whole = c.chat.completions.create(model=model, messages=MESSAGES, **kw)
        chunks = list(c.chat.completions.create(model=model, messages=MESSAGES, stream=True, **kw))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    streamed = ("".join(getattr(d, "reasoning_content", None) or "" for d in deltas),
                "".join(d.content or "" for d in deltas))
    return whole.choices[0].message, streamed


class Sink:
    def __init__(self) -> None:
        self.events: list = []
        self.done = threading.Event()

    def __call__(self, handle, event) -> None:
        self.events.append(event)
        if isinstance(event, Finished):
            self.done.set()


def ask_remote(url: str) -> tuple[list[str], Finished]:
    sink = Sink()
    backend = RemoteBackend(url, sink, poll_metrics=False)
    try:
        backend.submit(1, ChatPrompt(tuple(MESSAGES)), SamplingParams(temperature=0, max_tokens=12))
        assert sink.done.wait(60)
    finally:
        backend.shutdown()
    return [e.text for e in sink.events if isinstance(e, TextDelta)], sink.events[-1]


def as_shown(deltas: list[str], inside: bool = False) -> tuple[str, str]:
    """(reasoning, answer) as the app's transcript gets them from a stream of text deltas."""
    splitter, parts = ReasoningSplitter(inside), {"reasoning": "", "content": ""}
    for kind, text in [p for d in deltas for p in splitter.feed(d)] + splitter.flush():
        parts[kind] += text
    return parts["reasoning"], parts["content"]


@pytest.fixture
def scripted():
    servers = []

    def start(deltas, reasoning_open=False) -> str:
        servers.append(ThreadServer(ScriptedEngine(deltas, reasoning_open)))
        return servers[-1].url

    yield start
    for s in servers:
        s.stop()


def test_tags_split_across_deltas_come_out_as_reasoning_content(scripted):
    url = scripted(SPLIT)
    message, streamed = ask_openai(url, "scripted")
    assert (message.reasoning_content, message.content) == ("Two plus two.", "\n\nIt is 4.")
    assert streamed == ("Two plus two.", "\n\nIt is 4.")

    deltas, finished = ask_remote(url)  # the remote backend: the same block as the in-process stream gives
    assert as_shown(deltas) == as_shown(SPLIT) == ("Two plus two.", "\n\nIt is 4.")
    assert split_reasoning(finished.text) == ("Two plus two.", "\n\nIt is 4.")


def test_a_reply_begun_inside_reasoning(scripted):
    script = ["Hmm, two", " and two.</think>", "Four."]
    url = scripted(script, reasoning_open=True)
    message, streamed = ask_openai(url, "scripted")
    assert (message.reasoning_content, message.content) == ("Hmm, two and two.", "Four.")
    assert streamed == ("Hmm, two and two.", "Four.")
    deltas, finished = ask_remote(url)
    assert as_shown(deltas) == as_shown(script, inside=True) == ("Hmm, two and two.", "Four.")


def test_a_reply_without_reasoning_has_no_reasoning_content(scripted):
    url = scripted(["Just", " four."])
    message, streamed = ask_openai(url, "scripted")
    assert message.content == "Just four." and getattr(message, "reasoning_content", None) is None
    assert streamed == ("", "Just four.")
    deltas, finished = ask_remote(url)
    assert deltas == ["Just", " four."] and finished.text == "Just four."


def test_reasoning_sent_back_goes_into_the_reply_text_where_the_template_sees_it():
    engine = ScriptedEngine(["Ok."])
    server = ThreadServer(engine)
    try:
        history = MESSAGES + [{"role": "assistant", "content": "4.", "reasoning_content": "Two and two."},
                              {"role": "user", "content": "Sure?"}]
        with openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as c:
            c.chat.completions.create(model="scripted", messages=history)
            with pytest.raises(openai.BadRequestError, match="assistant message only"):
                c.chat.completions.create(model="scripted", messages=[{**MESSAGES[0], "reasoning_content": "x"}])
        assert engine.submitted[0][1] == {"role": "assistant", "content": "<think>Two and two.</think>4."}
    finally:
        server.stop()


@pytest.fixture(scope="module")
def thinking_server(tiny_model_dir, tmp_path_factory):
    """The tiny model with a template whose generation prompt opens <think> (as DeepSeek-R1's and Qwen3's thinking
    templates do): its every reply begins inside reasoning."""
    folder = tmp_path_factory.mktemp("think") / "tiny-thinker"
    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] += "{% if add_generation_prompt %}{{ '<think>\\n' }}{% endif %}"
    config_path.write_text(json.dumps(config))
    server = Server("--model", str(folder), "--kv-cache-gb", "0.01", "--no-kv-disk")
    yield server
    assert server.stop() == 0, "".join(server.log)


def test_the_real_engine_says_its_reply_began_inside_reasoning(thinking_server):
    message, streamed = ask_openai(thinking_server.url, "tiny-thinker", temperature=0, max_tokens=12)
    assert message.reasoning_content and message.content == ""  # (gibberish, never a </think>)
    assert streamed == (message.reasoning_content, "")
    deltas, finished = ask_remote(thinking_server.url)
    assert as_shown(deltas) == (message.reasoning_content, "")
    assert finished.text.startswith("<think>")
