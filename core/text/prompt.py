"""The prompt of a conversation's next turn: the exact ids it already fed and got back, then only what
the new message adds.

Turn N+1's prompt = every id of turn N (prompt + reply, end-of-turn token included) + the ids of the
template text that the new user message adds. Nothing earlier is re-tokenized, so the prefix matches
the KV cache bit for bit. The BOS rule is the tokenizer's and applies once, at the start of a chat.
"""
from __future__ import annotations

from collections.abc import Sequence

from .tokenizer import Tokenizer


def prompt_ids_for(tokenizer: Tokenizer, messages: Sequence[dict], token_ids: Sequence[int] = ()) -> list[int]:
    """The ids to submit: `messages` are the template messages, the new user message last; `token_ids`
    are the ids the conversation fed and got so far (empty for its first turn)."""
    rendered = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True)
    if token_ids:
        fed = tokenizer.decode(token_ids)
        if rendered.startswith(fed):
            return list(token_ids) + tokenizer.encode(rendered[len(fed):], add_bos=False)
    # The first turn, or the template rewrote earlier turns (or a stop string cut a reply): a fresh
    # tokenization; the prefix cache still reuses whatever leading blocks match.
    return tokenizer.encode(rendered)


def chat_messages(question: str, system: str | None = None) -> list[dict]:
    """One question (after a system prompt, when one is given) as chat messages."""
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": question}]
