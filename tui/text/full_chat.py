"""A turn that does not fit the context (issue 27 item 5): the choices, each priced before it is taken.

- drop the oldest turns: a new chat with the system prompt and the turns that fit (with the new message and its
  reply's max tokens); its prompt is tokenized afresh, so everything after the system prompt is prefilled again
  (the system prompt's blocks stay cached);
- fork from an earlier message: a new chat with this one up to the latest reply after which the new message and
  its reply fit; it shares those blocks, so only the new message is prefilled.
The full chat is never changed; the new chat's title records the choice.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.chats.conversation import Conversation, Message


@dataclass(frozen=True, slots=True)
class Choice:
    kind: str  # "trim" or "fork"
    keep_from: int  # trim: index of the first message kept; fork: index of the last message kept
    num_prefill_tokens: int
    seconds: float  # at the measured prefill rate (NaN: none measured yet)
    text: str


def _span_tokens(m: Message) -> int | None:
    return m.token_span[1] - m.token_span[0] if m.token_span is not None else None


def full_chat_choices(chat: Conversation, message_tokens: int, context: int, prefill_rate: float) -> list[Choice]:
    """The priced ways to send a message of about `message_tokens` tokens in `chat`, which is too full for it."""
    messages, room = chat.messages, context - message_tokens - chat.settings.max_tokens
    spans = [_span_tokens(m) for m in messages]
    if room <= 0 or any(s is None for s in spans) or not messages:
        return []
    system = messages[0].token_span[0]  # the template's opening and the system prompt, before the first message
    choices = []

    def seconds(n: int) -> float:
        return n / prefill_rate if prefill_rate > 0 else float("nan")

    def cost(n: int) -> str:
        return f"~{seconds(n):.1f} s" if prefill_rate > 0 else "time not measured yet"

    for first in range(0, len(messages), 2):  # whole turns, oldest first
        kept = sum(spans[first:])
        if messages[first].role == "user" and system + kept <= room:
            n = kept + message_tokens
            dropped = first // 2
            choices.append(Choice("trim", first, n, seconds(n), f"Drop the oldest {dropped} turns (new chat; system "
                                  f"prompt cached): prefill {n:,} tokens · {cost(n)}"))
            break
    for last in range(len(messages) - 1, -1, -1):
        if messages[last].role == "assistant" and messages[last].token_span[1] <= room:
            n = message_tokens
            shared = messages[last].token_span[1]
            choices.append(Choice("fork", last, n, seconds(n), f"Fork after message #{last + 1} (shares {shared:,} "
                                  f"cached tokens): prefill {n:,} tokens · {cost(n)}"))
            break
    return choices
