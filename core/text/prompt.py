"""The one prompt builder: the ids of a conversation's next turn, with BOS exactly once.

Turn N+1's prompt = every id of turn N (prompt + reply, end-of-turn token included) + the ids of the
template text that the new user message adds. Nothing earlier is re-tokenized, so the prefix matches
the KV cache bit for bit. The app, serve, ask, bench and the tests all build prompts here.

BOS: a template may write `{{ bos_token }}` (Llama 2/3 do) and a tokenizer may add one (`add_bos_token`,
or a BOS-adding post-processor): the prompt starts with exactly one BOS when either asks for it, none
when neither does. The text is normalized first (`prompt_text`), so the continuation check compares the
same text turn after turn.
"""
from __future__ import annotations

from collections.abc import Sequence

from .special_text import encode_pieces, fed_prefix_fits, holds_special_text, mark_messages, segments
from .tokenizer import Tokenizer


def prompt_text(tokenizer: Tokenizer, messages: Sequence[dict]) -> str:
    """The rendered template (generation prompt included), its leading BOS written once if the template
    wrote it (any number of times) or the tokenizer adds one."""
    rendered = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True)
    bos = tokenizer.special_tokens.get("bos_token") if tokenizer.bos_token_id is not None else None
    if not bos:
        return rendered
    body = rendered
    while body.startswith(bos):
        body = body[len(bos):]
    return bos + body if tokenizer.add_bos_token or body != rendered else rendered


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """`text` as ids; a leading BOS text is the BOS id (even where the BOS is no added token of the vocab)."""
    bos = tokenizer.special_tokens.get("bos_token") if tokenizer.bos_token_id is not None else None
    if bos and text.startswith(bos):
        return [tokenizer.bos_token_id] + tokenizer.encode(text[len(bos):], add_bos=False)
    return tokenizer.encode(text, add_bos=False)


def prompt_ids_for(tokenizer: Tokenizer, messages: Sequence[dict], token_ids: Sequence[int] = ()) -> list[int]:
    """The ids to submit: `messages` are the template messages, the new user message last; `token_ids`
    are the ids the conversation fed and got so far (empty for its first turn). Special-token strings in the
    messages' text stay plain text (special_text); only the template places special ids."""
    if holds_special_text(tokenizer, messages):
        return _ids_with_plain_specials(tokenizer, messages, token_ids)
    text = prompt_text(tokenizer, messages)
    if token_ids:
        fed = tokenizer.decode(token_ids)
        if text.startswith(fed):
            return list(token_ids) + tokenizer.encode(text[len(fed):], add_bos=False)
    # The first turn, or the template rewrote earlier turns (or a stop string cut a reply): a fresh
    # tokenization; the prefix cache still reuses whatever leading blocks match.
    return _encode(tokenizer, text)


def _ids_with_plain_specials(tokenizer: Tokenizer, messages: Sequence[dict], token_ids: Sequence[int]) -> list[int]:
    """prompt_ids_for where some message text holds a special-token string: render with those strings marked,
    keep the fed ids where they are this tokenization's prefix, encode the rest piece by piece."""
    marked, mark = mark_messages(tokenizer, messages, tokenizer.chat_template or "")
    pieces = segments(tokenizer, prompt_text(tokenizer, marked), mark)
    fed_length = fed_prefix_fits(tokenizer, token_ids, pieces) if token_ids else None
    if fed_length is not None:
        return list(token_ids) + encode_pieces(tokenizer, pieces, fed_length)
    return encode_pieces(tokenizer, pieces, leading_bos=True)


def chat_messages(question: str, system: str | None = None) -> list[dict]:
    """One question (after a system prompt, when one is given) as chat messages."""
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": question}]
