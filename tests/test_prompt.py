"""The one prompt builder (core/text/prompt.py): BOS exactly once whatever the tokenizer and template do,
and turn N+1's ids extend turn N's, through the path the app takes (EngineService renders on its thread)."""
from __future__ import annotations

import dataclasses

import pytest

from llmchat.core.api.events import Finished, Started
from llmchat.core.api.params import SamplingParams
from llmchat.core.backends.service import EngineService
from llmchat.core.chats.conversation import ChatSettings, Conversation
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.text.prompt import prompt_ids_for
from llmchat.core.text.tokenizer import Tokenizer

# Llama 3's template, in this vocabulary's turn markers: `{{ bos_token }}` first, then the turns.
LLAMA3_STYLE = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
BOS = "<|endoftext|>"  # a special token of the default model's vocabulary (id 0)


def tokenizer_with(base: Tokenizer, template: str, add_bos_token: bool | None) -> Tokenizer:
    config = {**base._config, "bos_token": BOS}
    config.pop("add_bos_token", None)
    if add_bos_token is not None:
        config["add_bos_token"] = add_bos_token
    return Tokenizer(base._backend, config, template)


@pytest.mark.parametrize("bos_in_template", [0, 1, 2])
@pytest.mark.parametrize("add_bos_token", [True, False])
def test_bos_exactly_once_whatever_template_and_tokenizer_do(tiny_model, bos_in_template, add_bos_token):
    template = "{{ bos_token }}" * bos_in_template + LLAMA3_STYLE.removeprefix("{{ bos_token }}")
    tok = tokenizer_with(tiny_model.tokenizer, template, add_bos_token)
    ids = prompt_ids_for(tok, [{"role": "user", "content": "hi"}])
    wanted = 1 if add_bos_token or bos_in_template else 0
    assert ids.count(tok.bos_token_id) == wanted and (ids[0] == tok.bos_token_id) == bool(wanted)
    assert tok.decode(ids[wanted:]).startswith("<|im_start|>user\nhi<|im_end|>")


def test_llama3_style_chat_through_the_service_has_one_bos_and_extends(tiny_model):
    """`{{ bos_token }}` in the template and add_bos_token true (Llama 3 does both): the prompts the engine
    is fed (Started.prompt_ids, rendered on the engine thread) hold one BOS, and each turn extends the last."""
    tok = tokenizer_with(tiny_model.tokenizer, LLAMA3_STYLE, True)
    assert tok.add_bos_token and tok.bos_token_id == 0
    events: list = []
    service = EngineService(LLMEngine(dataclasses.replace(tiny_model, tokenizer=tok), EngineConfig()),
                            lambda handle, event: events.append(event))
    chat = Conversation(1, settings=ChatSettings(system_prompt="Be brief."))
    previous: list[int] = []
    try:
        for text in ["one", "two", "three"]:
            user, reply = chat.start_turn(text)
            handle = service.submit(1, chat.prompt(), SamplingParams(temperature=0, max_tokens=5))
            result = handle.wait(60)
            assert isinstance(result, Finished), "the turn finished"
            (started,) = [e for e in events if isinstance(e, Started) and e.request_id == result.request_id]
            prompt = list(started.prompt_ids)
            assert prompt.count(tok.bos_token_id) == 1 and prompt[0] == tok.bos_token_id, "exactly one BOS"
            assert prompt[: len(previous)] == previous and len(prompt) > len(previous), "turn N+1 extends turn N"
            chat.begin_reply(user, reply, prompt)
            chat.extend_reply(reply, list(result.output_ids))
            chat.finish_reply(reply, result.text, "done", result.reason.value)
            previous = list(chat.token_ids)
    finally:
        service.shutdown()
