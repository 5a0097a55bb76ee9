"""A chat's next prompt extends the exact ids it already fed and got, whatever the template does."""
from __future__ import annotations

from llmchat.core.chat import Chat


def test_next_prompt_extends_the_exact_ids(tiny_model):
    tok = tiny_model.tokenizer
    chat = Chat.new("Be brief.")
    first = chat.prompt_for(tok, "Hello 👋 there")
    assert tok.decode(first) == tok.apply_chat_template(chat.template_messages() + [
        {"role": "user", "content": "Hello 👋 there"}])
    reply_ids = tok.encode("Hi! How can I help?") + [tok.token_to_id("<|im_end|>")]
    chat.record_turn("Hello 👋 there", first, reply_ids, "Hi! How can I help?")
    second = chat.prompt_for(tok, "Tell me more")
    assert second[: len(first) + len(reply_ids)] == first + reply_ids  # nothing earlier re-tokenized
    rendered = tok.apply_chat_template(chat.template_messages() + [{"role": "user", "content": "Tell me more"}])
    assert tok.decode(second) == rendered


def test_a_reply_cut_short_still_extends(tiny_model):
    tok = tiny_model.tokenizer
    chat = Chat.new()
    first = chat.prompt_for(tok, "Count")
    reply_ids = tok.encode("one two thr")  # max_tokens hit: no end-of-turn token
    chat.record_turn("Count", first, reply_ids, "one two thr")
    second = chat.prompt_for(tok, "go on")
    assert second[: len(first) + len(reply_ids)] == first + reply_ids


def test_text_that_differs_from_the_ids_falls_back_to_a_fresh_prompt(tiny_model):
    tok = tiny_model.tokenizer
    chat = Chat.new()
    first = chat.prompt_for(tok, "Say hi")
    reply_ids = tok.encode("hi STOP more") + [tok.token_to_id("<|im_end|>")]
    chat.record_turn("Say hi", first, reply_ids, "hi ")  # a stop string cut the shown text
    second = chat.prompt_for(tok, "again")
    rendered = tok.apply_chat_template(chat.template_messages() + [{"role": "user", "content": "again"}])
    assert tok.decode(second) == rendered  # what the model sees matches what the user sees
    assert second[: len(first)] == first  # and the prompt's own prefix still hits the cache
