"""A turn that does not fit the context (issue 27 item 5): the choices, each priced before it is taken.

- continue from a summary: the model writes a summary of the chat (the chat's prompt and a fixed instruction as
  its last user turn: what is cached of the chat is reused, the rest prefilled, then up to a reply budget written
  at the measured time per token), and a new chat starts with it as its system prompt;
- drop the oldest turns: a new chat with the system prompt and the turns that fit (with the new message and its
  reply's max tokens); its prompt is tokenized afresh, so everything after the system prompt is prefilled again
  (the system prompt's blocks stay cached);
- fork from an earlier message: a new chat with this one up to the latest reply after which the new message and
  its reply fit; it shares those blocks, so only the new message is prefilled.
The full chat is never changed; the new chat's title records the choice.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ...core.chats.conversation import Conversation, Message

SUMMARY_MAX_TOKENS = 256  # the summary's reply budget, at most
SUMMARY_MIN_TOKENS = 32  # with less room than this for it, no summary is offered
SUMMARY_FRAME_TOKENS = 48  # the new chat's template text and the summary's heading, around the summary
SUMMARY_INSTRUCTION = (
    "Summarize our conversation so far for a new chat that will continue it: the facts, names, numbers and "
    "decisions it needs, and what was asked last. Write only the summary, in a few short paragraphs.")


@dataclass(frozen=True, slots=True)
class Choice:
    kind: str  # "summary", "trim" or "fork"
    keep_from: int  # trim: index of the first message kept; fork: index of the last message kept; summary: 0
    num_prefill_tokens: int  # summary: its request's uncached tokens + its budget + the new chat's first prompt
    seconds: float  # at the measured prefill rate (and TPOT, for the summary's reply); NaN: none measured yet
    text: str
    max_summary_tokens: int = 0  # summary: the reply budget of its request


def _span_tokens(m: Message) -> int | None:
    return m.token_span[1] - m.token_span[0] if m.token_span is not None else None


def _median_tpot(recent_tpot: tuple[float, ...]) -> float:
    measured = [t for t in recent_tpot if t == t]
    return statistics.median(measured) if measured else math.nan


def summary_messages(chat: Conversation) -> list[dict]:
    """The summary request's template messages: the chat's, then the fixed instruction as a user turn (a new list:
    the chat itself is not changed)."""
    return chat.template_messages() + [{"role": "user", "content": SUMMARY_INSTRUCTION}]


def summary_choice(chat: Conversation, num_prompt_tokens: int, num_reused_tokens: int, message_tokens: int,
                   context: int, prefill_rate: float, recent_tpot: tuple[float, ...]) -> Choice | None:
    """The summary option, priced from a cost preview of its request (`num_prompt_tokens`, of which
    `num_reused_tokens` are cached); None when the chat leaves no room for the model to write one."""
    room = context - message_tokens - chat.settings.max_tokens  # what the new chat's first prompt may take
    budget = min(SUMMARY_MAX_TOKENS, context - num_prompt_tokens, room - SUMMARY_FRAME_TOKENS)
    if budget < SUMMARY_MIN_TOKENS:
        return None
    num_prefill = num_prompt_tokens - num_reused_tokens
    num_first = SUMMARY_FRAME_TOKENS + budget + message_tokens  # the new chat's first turn prefills all of it
    tpot = _median_tpot(recent_tpot)
    seconds = ((num_prefill + num_first) / prefill_rate + budget * tpot) if prefill_rate > 0 else math.nan
    cost = f"~{seconds:.1f} s" if seconds == seconds else "time not measured yet"
    text = (f"Continue from a summary the model writes (new chat): prefill {num_prefill:,} tokens "
            f"({num_reused_tokens:,} cached) + write ≤{budget:,}, then ≤{num_first:,} in the new chat · {cost}")
    return Choice("summary", 0, num_prefill + num_first, seconds, text, budget)


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
