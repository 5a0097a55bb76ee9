"""An earlier reply's reasoning and the prefix cache (decision: the template's own rule applies). The chat keeps
the exact ids it fed and got, reasoning included; a template that drops earlier turns' reasoning (Qwen3's,
DeepSeek-R1's) renders the next prompt without it, so the prompt builder re-tokenizes (core/text/prompt.py) and
the explainer says the template dropped the reasoning and how many tokens are prefilled again."""
from __future__ import annotations

import pytest

from llmchat.core.api.explanation import PromptContext
from llmchat.core.api.params import SamplingParams
from llmchat.core.chats.conversation import ChatSettings, Conversation
from llmchat.core.config import EngineConfig
from llmchat.core.engine.cache_explainer import reasoning_block_at
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.model.loader import LoadedModel
from llmchat.core.text.prompt import prompt_ids_for
from llmchat.core.text.tokenizer import Tokenizer
from llmchat.tui.text.cache_text import explanation_line

BS = 16
# ChatML, with Qwen3's rule for an assistant turn: the text after the last </think> (its reasoning left out)
DROPS_REASONING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and '</think>' in m.content %}{{ m.content.split('</think>')[-1].lstrip('\\n') }}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BLOCK = "<think>\nThe user wants help. Say yes.\n</think>\n\n"
ANSWER = "Sure thing!"


OPENS_THINK = "{% if add_generation_prompt %}<think>\n{% endif %}"  # (DeepSeek-R1's generation prompt opens it)


def thinking_model(tiny_model, template: str = DROPS_REASONING) -> LoadedModel:
    tok = tiny_model.tokenizer
    tokenizer = Tokenizer(tok._backend, tok._config, template)
    return LoadedModel(tiny_model.folder, tiny_model.config, tiny_model.model, tokenizer, 0.0)


def test_reasoning_block_at():
    texts = {1: "<th", 2: "ink>", 3: "hmm", 4: "</think>", 5: "\n\n", 6: "Yes", 7: " ", 8: "<", 9: "b>"}
    at = texts.__getitem__
    assert reasoning_block_at([6, 1, 2, 3, 4, 5, 6], 1, at) == 5  # the block and the blank line after it
    assert reasoning_block_at([1, 2, 3], 0, at) == 0  # never closed: a template keeps it as it is
    assert reasoning_block_at([8, 9, 4], 0, at) == 0  # another tag
    assert reasoning_block_at([7, 1, 2, 4, 6], 0, at) == 4


@pytest.mark.parametrize("opened", [False, True], ids=["reply-opens-think", "prompt-opened-think"])
def test_the_template_drops_the_earlier_reasoning_and_the_explainer_says_so(tiny_model, opened):
    model = thinking_model(tiny_model, DROPS_REASONING + (OPENS_THINK if opened else ""))
    tok = model.tokenizer
    engine = LLMEngine(model, EngineConfig())
    chat = Conversation(1, settings=ChatSettings(None, 0.0, 1.0, 12))
    user, reply = chat.start_turn("Can you help me? " * 4)
    first_prompt = prompt_ids_for(tok, chat.template_messages(upto=reply))
    chat.begin_reply(user, reply, first_prompt)
    block = BLOCK.removeprefix("<think>\n") if opened else BLOCK  # (the prompt has the <think>)
    block_ids, answer_ids = tok.encode(block, add_bos=False), tok.encode(ANSWER, add_bos=False)
    chat.extend_reply(reply, block_ids + answer_ids + [tok.token_to_id("<|im_end|>")])
    chat.finish_reply(reply, block + ANSWER, "done", "stop")
    kept = list(chat.token_ids)
    engine.add_request(kept, SamplingParams(temperature=0, max_tokens=1), tag=1, context=PromptContext((), None, True))
    list(engine.run_until_done())  # the engine computed (and cached) the kept ids, reasoning included

    user, reply = chat.start_turn("Thanks")
    prompt = prompt_ids_for(tok, chat.template_messages(upto=reply), kept)
    text = tok.decode(prompt)
    assert "Say yes" not in text and f"assistant\n{ANSWER}<|im_end|>" in text  # the template's rule applied
    start = len(first_prompt) - (len(tok.encode("<think>\n", add_bos=False)) if opened else 0)
    assert prompt[:start] == first_prompt[:start]  # everything before the reasoning is still the chat's ids
    engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=2), tag=1,
                       context=PromptContext(tuple(kept), None, True))
    finished = [e for e in engine.run_until_done() if hasattr(e, "explanation")][-1]
    e = finished.explanation
    assert e.cause == "reasoning" and e.divergence == start
    assert e.num_dropped_reasoning_tokens == len(first_prompt) - start + len(block_ids)
    assert e.num_reprefilled_tokens == len(answer_ids) + 1  # the answer and its end of turn, at new positions
    assert e.num_cached_tokens == start // BS * BS
    line = explanation_line(e)
    assert line == (f"reuse ended at {e.num_cached_tokens:,}: the template drops earlier turns' reasoning "
                    f"({e.num_dropped_reasoning_tokens} tokens from token {start}): "
                    f"{len(answer_ids) + 1 + e.num_recomputed_tokens} tokens prefilled again")


def test_the_service_says_when_the_prompt_opened_think(tiny_model):
    """Started.reasoning_open: the rendered prompt ends with an opened <think> (DeepSeek-R1's and Qwen3's thinking
    templates' generation prompt), so the reply's text begins inside reasoning; not with a plain template."""
    import threading

    from llmchat.core.api.events import Started
    from llmchat.core.backends.service import EngineService

    tok = tiny_model.tokenizer
    opens = Tokenizer(tok._backend, tok._config, DROPS_REASONING + OPENS_THINK)
    for tokenizer, expected in ((opens, True), (tok, False)):
        model = LoadedModel(tiny_model.folder, tiny_model.config, tiny_model.model, tokenizer, 0.0)
        seen, lock = [], threading.Lock()

        def sink(handle, event):
            with lock:
                seen.append(event)

        service = EngineService(LLMEngine(model, EngineConfig()), sink)
        try:
            handle = service.submit_messages([{"role": "user", "content": "Hi"}], (), SamplingParams(max_tokens=2))
            assert handle.wait(30) is not None
        finally:
            service.shutdown()
        (started,) = [e for e in seen if isinstance(e, Started)]
        assert started.reasoning_open is expected
