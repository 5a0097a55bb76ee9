"""Each family's real chat template renders in our sandbox as transformers renders it, and the prompt ids
(core/text/prompt.py) are transformers' ids with one BOS; a system prompt for a template without a system
role is folded into the first user turn (core/text/system_role.py).

The templates in tests/data/chat_templates/ are the models' own (as llama.cpp keeps them in models/templates/).
The tokenizer is a byte-level one with each family's special tokens added, so ids are checked exactly."""
from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from llmchat.core.text.chat_template import ChatTemplateError, TemplateRefused
from llmchat.core.text.prompt import prompt_ids_for, prompt_text
from llmchat.core.text.system_role import fold_system_messages
from llmchat.core.text.tokenizer import Tokenizer

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"

FAMILIES = {  # template file: (special tokens, bos, eos, add_bos_token: True / False / None = the post-processor adds it)
    "llama3.2.jinja": (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                        "<|eot_id|>"], "<|begin_of_text|>", "<|eot_id|>", None),
    "qwen3.jinja": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", False),
    "gemma2.jinja": (["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>", True),
    "gemma3.jinja": (["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>", True),
    "phi3.5.jinja": (["<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], "<s>", "<|end|>", False),
    "mistral-v0.1.jinja": (["<s>", "</s>"], "<s>", "</s>", True),
    "mistral-nemo.jinja": (["<s>", "</s>", "[INST]", "[/INST]"], "<s>", "</s>", True),
}
NO_SYSTEM_ROLE = {"gemma2.jinja", "mistral-v0.1.jinja"}  # their templates raise on a system message
# A template that drops a system message without a word (Phi-3-mini-4k-instruct's first template did).
DROPS_SYSTEM = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
                "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}"
                "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}"
                "{% endfor %}")

SYSTEM = {"role": "system", "content": "You are terse. Answer in one line."}
CONVERSATIONS = {
    "one user turn": [{"role": "user", "content": "What is a KV cache?"}],
    "system and user": [SYSTEM, {"role": "user", "content": "What is a KV cache?"}],
    "three turns": [SYSTEM, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "  Name a cache.\n"}],
    "earlier reasoning": [{"role": "user", "content": "2+2?"},
                          {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
                          {"role": "user", "content": "and 3+3?"}],
}


def backend_for(specials: list[str], bos: str | None, add_bos_token: bool | None) -> HFTokenizer:
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(specials)
    backend.add_tokens(["<think>", "</think>"])  # added but not special, as in Qwen3's vocabulary
    if add_bos_token is None:  # Llama 3: no add_bos_token flag, the post-processor writes the BOS
        backend.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[
            (bos, backend.token_to_id(bos))])
    return backend


def tokenizers_for(name: str, template: str | None = None) -> tuple[Tokenizer, PreTrainedTokenizerFast]:
    """Ours (as a model folder's tokenizer_config.json would make it) and transformers', from one backend."""
    specials, bos, eos, add_bos_token = FAMILIES[name]
    template = template or (TEMPLATES / name).read_text(encoding="utf-8")
    config = {"eos_token": eos, **({"bos_token": bos} if bos else {})}
    if add_bos_token is not None:
        config["add_bos_token"] = add_bos_token
    ours = Tokenizer(backend_for(specials, bos, add_bos_token), config, template)
    theirs = PreTrainedTokenizerFast(tokenizer_object=backend_for(specials, bos, add_bos_token), bos_token=bos,
                                     eos_token=eos, chat_template=template)
    return ours, theirs


def transformers_prompt(theirs: PreTrainedTokenizerFast, messages: list[dict]) -> tuple[str, list[int]]:
    """transformers' text and ids for `messages` (it tokenizes the rendered text without adding specials)."""
    text = theirs.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = theirs.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return text, list(ids)


def expected_prompt(name: str, theirs: PreTrainedTokenizerFast, messages: list[dict]) -> tuple[str, list[int]]:
    if name in NO_SYSTEM_ROLE and messages[0]["role"] == "system":
        with pytest.raises(Exception, match="System role not supported|roles must alternate"):
            transformers_prompt(theirs, messages)  # transformers refuses it: we fold it, as the template expects
        return transformers_prompt(theirs, fold_system_messages(messages))
    return transformers_prompt(theirs, messages)


@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_template_renders_as_transformers_renders_it_with_one_bos(name: str, conversation: str) -> None:
    ours, theirs = tokenizers_for(name)
    messages = CONVERSATIONS[conversation]
    text, ids = expected_prompt(name, theirs, messages)
    assert prompt_text(ours, messages) == text
    assert prompt_ids_for(ours, messages) == ids
    if "bos_token" in ours.chat_template or ours.add_bos_token:
        assert ids.count(ours.bos_token_id) == 1 and ids[0] == ours.bos_token_id, "exactly one BOS, first"
    else:  # Qwen3 has no BOS; Phi-3.5's template writes none and its tokenizer adds none
        assert ours.bos_token_id is None or ours.bos_token_id not in ids
    if messages[0]["role"] == "system":
        assert SYSTEM["content"] in text, "the system prompt reaches the model"


@pytest.mark.parametrize("name", list(FAMILIES))
def test_turn_two_built_on_turn_one_ids_equals_transformers(name: str) -> None:
    """The app feeds turn 1's prompt + reply ids back (prompt.py keeps them where the new render extends
    them); the result is transformers' tokenization of the whole second turn."""
    ours, theirs = tokenizers_for(name)
    turn_one = CONVERSATIONS["system and user"]
    reply = "<think>\nshort\n</think>\n\nIt keeps keys and values." if name == "qwen3.jinja" else "It keeps keys."
    fed = prompt_ids_for(ours, turn_one) + ours.encode(reply, add_bos=False) + [ours.eos_token_id]
    turn_two = turn_one + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And a block?"}]
    _, ids = expected_prompt(name, theirs, turn_two)
    assert prompt_ids_for(ours, turn_two, fed) == ids


def test_qwen3_drops_earlier_reasoning_and_can_turn_thinking_off() -> None:
    ours, theirs = tokenizers_for("qwen3.jinja")
    text = ours.apply_chat_template(CONVERSATIONS["earlier reasoning"])
    assert "add them" not in text and "<|im_start|>assistant\n4<|im_end|>" in text
    off = ours.apply_chat_template(CONVERSATIONS["one user turn"], enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert off == theirs.apply_chat_template(CONVERSATIONS["one user turn"], add_generation_prompt=True,
                                             tokenize=False, enable_thinking=False)


def test_a_template_that_drops_the_system_message_gets_it_folded() -> None:
    ours, theirs = tokenizers_for("phi3.5.jinja", DROPS_SYSTEM)
    messages = CONVERSATIONS["three turns"]
    assert SYSTEM["content"] not in theirs.apply_chat_template(messages, tokenize=False)  # what it would lose
    text = prompt_text(ours, messages)
    assert text.startswith(f"<s><|user|>\n{SYSTEM['content']}\n\nhi<|end|>")
    assert text == theirs.apply_chat_template(fold_system_messages(messages), tokenize=False)


def test_folding_puts_each_system_text_before_the_next_user_message() -> None:
    messages = [SYSTEM, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "system", "content": "Now in French."}, {"role": "user", "content": "c"},
                {"role": "system", "content": "last"}]
    assert fold_system_messages(messages) == [
        {"role": "user", "content": f"{SYSTEM['content']}\n\na"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "Now in French.\n\nc"}, {"role": "user", "content": "last"}]


def test_a_refusal_folding_cannot_fix_stays_the_templates_one_line() -> None:
    ours, _ = tokenizers_for("gemma2.jinja")
    two_users = [SYSTEM, {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(TemplateRefused, match="System role not supported") as excinfo:
        ours.apply_chat_template(two_users)
    assert "\n" not in str(excinfo.value) and isinstance(excinfo.value, ChatTemplateError)
