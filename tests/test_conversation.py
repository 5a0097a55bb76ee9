"""A conversation's next prompt extends the exact ids it already fed and got; its rules live in one place."""
from __future__ import annotations

import pytest

from llmchat.core.chats.conversation import DEFAULT_TITLE, ChatSettings, Conversation
from llmchat.core.text.prompt import prompt_ids_for
from llmchat.core.text.tokenizer import Tokenizer


def turn(tok, chat: Conversation, text: str, reply_ids: list[int], reply_text: str) -> list[int]:
    """One turn the way the backend and the UI run it; returns the prompt ids."""
    user, reply = chat.start_turn(text)
    prompt = prompt_ids_for(tok, chat.template_messages(), chat.token_ids)
    chat.begin_reply(user, reply, prompt)
    chat.extend_reply(reply, reply_ids)
    chat.finish_reply(reply, reply_text, "done", "stop")
    return prompt


def test_next_prompt_extends_the_exact_ids_and_spans_cover_them(tiny_model):
    tok = tiny_model.tokenizer
    chat = Conversation(1, settings=ChatSettings(system_prompt="Be brief."))
    reply_ids = tok.encode("Hi! How can I help?") + [tok.token_to_id("<|im_end|>")]
    first = turn(tok, chat, "Hello 👋 there", reply_ids, "Hi! How can I help?")
    assert tok.decode(first) == tok.apply_chat_template([
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello 👋 there"}])
    second = turn(tok, chat, "Tell me more", tok.encode("Sure."), "Sure.")
    assert second[: len(first) + len(reply_ids)] == first + reply_ids  # nothing earlier re-tokenized
    assert tok.decode(second) == tok.apply_chat_template(chat.template_messages()[:-1])
    spans = [m.token_span for m in chat.messages]
    assert spans[0] == (0, len(first)) and spans[1] == (len(first), len(first) + len(reply_ids))
    assert spans[2][0] == spans[1][1] and spans[3][1] == len(chat.token_ids)  # the spans tile the ids
    for a, b in zip(spans, spans[1:]):
        assert a[1] == b[0]


def test_a_reply_cut_short_still_extends(tiny_model):
    tok = tiny_model.tokenizer
    chat = Conversation(1)
    reply_ids = tok.encode("one two thr")  # max_tokens hit: no end-of-turn token
    first = turn(tok, chat, "Count", reply_ids, "one two thr")
    second = prompt_ids_for(tok, chat.template_messages() + [{"role": "user", "content": "go on"}], chat.token_ids)
    assert second[: len(first) + len(reply_ids)] == first + reply_ids


def test_text_that_differs_from_the_ids_falls_back_to_a_fresh_prompt(tiny_model):
    tok = tiny_model.tokenizer
    chat = Conversation(1)
    first = turn(tok, chat, "Say hi", tok.encode("hi STOP more") + [tok.token_to_id("<|im_end|>")], "hi ")
    user, reply = chat.start_turn("again")  # a stop string cut the shown text: the ids say more than the text
    second = prompt_ids_for(tok, chat.template_messages(), chat.token_ids)
    assert tok.decode(second) == tok.apply_chat_template(chat.template_messages())  # the model sees what the user sees
    assert second[: len(first)] == first  # and the prompt's own prefix still hits the cache
    chat.begin_reply(user, reply, second)
    assert chat.messages[0].token_span is None and user.token_span is None  # stale spans are not kept


def test_a_tokenizer_that_adds_bos_gets_exactly_one(tiny_model):
    base = tiny_model.tokenizer
    tok = Tokenizer(base._backend, {**base._config, "add_bos_token": True, "bos_token": "<|endoftext|>"},
                    base.chat_template)
    assert tok.add_bos_token and tok.bos_token_id is not None
    chat = Conversation(1, settings=ChatSettings(system_prompt="Be brief."))
    previous: list[int] = []
    for n, text in enumerate(["one", "two", "three"]):
        prompt = turn(tok, chat, text, tok.encode(f"reply {n}", add_bos=False) + [tok.token_to_id("<|im_end|>")],
                      f"reply {n}")
        assert prompt[: len(previous)] == previous, "turn N+1's ids extend turn N's"
        assert prompt.count(tok.bos_token_id) == 1 and prompt[0] == tok.bos_token_id
        previous = chat.token_ids


def test_the_title_rule():
    chat = Conversation(1)
    user, reply = chat.start_turn("  first   question\nsecond line")
    assert chat.title == "first question"
    chat.start_turn("not the title")
    assert chat.title == "first question"
    chat.undo_turn(user, reply)
    assert chat.title == "not the title"  # the first user message that remains
    chat.rename("  My   chat ")
    assert (chat.title, chat.title_auto) == ("My chat", False)
    chat.start_turn("would have titled it")
    assert chat.title == "My chat"
    with pytest.raises(ValueError, match="empty"):
        chat.rename("  ")
    other = Conversation(2)
    u, r = other.start_turn("x" * 100)
    assert len(other.title) == 48 and other.title.endswith("…")
    other.undo_turn(u, r)
    assert other.title == DEFAULT_TITLE


def test_branches_keep_the_exact_ids_before_the_change(tiny_model):
    """Regenerate, edit (cut), undo and fork: the next prompt starts with the ids the chat had before the
    changed message, bit for bit, so the prefix cache serves every full block before it."""
    tok = tiny_model.tokenizer
    end = tok.token_to_id("<|im_end|>")
    chat = Conversation(1, settings=ChatSettings(system_prompt="Be brief."))
    first_prompt = turn(tok, chat, "Hello", tok.encode("Hi!") + [end], "Hi!")
    second_prompt = turn(tok, chat, "Tell me more", tok.encode("Sure.") + [end], "Sure.")
    ids = list(chat.token_ids)
    user_span = chat.messages[2].token_span

    # regenerate: the same prompt ids again
    dropped = chat.drop_last_reply()
    assert dropped.content == "Sure." and chat.messages[-1].content == "Tell me more"
    user, reply = chat.start_reply()
    assert prompt_ids_for(tok, chat.template_messages(), chat.token_ids) == second_prompt
    chat.begin_reply(user, reply, second_prompt)
    assert user.token_span == user_span and user_span[1] == len(second_prompt)
    chat.extend_reply(reply, ids[len(second_prompt):])
    chat.finish_reply(reply, "Sure.", "done", "stop")
    assert chat.token_ids == ids

    # a fork at the first reply: its ids up to that reply's end
    fork = chat.branch(chat.messages[1])
    assert fork.token_ids == ids[: chat.messages[1].token_span[1]] and len(fork.messages) == 2
    assert fork.title.endswith("(fork)") and fork.messages[0] is not chat.messages[0]

    # cut at the second user message (edit or undo): the ids before it stay; a new message extends them
    cut_at = chat.messages[2].token_span[0]
    removed = chat.cut_at(chat.messages[2])
    assert [m.content for m in removed] == ["Tell me more", "Sure."] and chat.token_ids == ids[:cut_at]
    edited = turn(tok, chat, "Tell me less", tok.encode("Ok.") + [end], "Ok.")
    assert edited[:cut_at] == ids[:cut_at]
