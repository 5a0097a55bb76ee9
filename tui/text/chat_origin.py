"""The line at the top of a chat that continued a full one (core/chats/origin.py): which chat, by which choice,
what it measured (the summary request; the first turn's prefill here) and the price the choice showed. It is shown
above the messages and never sent to the model."""
from __future__ import annotations

from ...core.api.metrics import RequestMetrics
from ...core.chats.origin import ChatOrigin
from ...core.text.sanitize import safe_text
from . import format as fmt

HOW = {"summary": "by a summary the model wrote", "trim": "with its oldest turns dropped",
       "fork": "as a fork that leaves room"}


def _request_seconds(m: RequestMetrics) -> float:
    """Arrival to the last token: TTFT, then TPOT for each token after the first."""
    decode = m.tpot * (m.num_output_tokens - 1) if m.num_output_tokens > 1 and m.tpot == m.tpot else 0.0
    return m.ttft + decode


def origin_text(o: ChatOrigin) -> str:
    """`continued from #3 by a summary the model wrote: summary 412 tokens prefilled + 180 written, 9.1 s; ...`"""
    parts = []
    if o.summary is not None:
        s = o.summary
        parts.append(f"summary {s.num_prefilled_tokens:,} tokens prefilled + {s.num_output_tokens:,} written, "
                     f"{fmt.seconds(_request_seconds(s))}")
    first = o.first_turn
    parts.append(f"first turn here {first.num_prefilled_tokens:,} tokens prefilled, {fmt.seconds(first.ttft)}"
                 if first is not None else "first turn here not sent yet")
    priced = f"~{fmt.seconds(o.estimated_seconds)}" if o.estimated_seconds == o.estimated_seconds else "not timed"
    parts.append(f"priced at {o.estimated_tokens:,} tokens, {priced}")
    return f"Continued from #{o.from_chat_id} {HOW[o.how]}: " + "; ".join(parts)


def origin_block(o: ChatOrigin, system_prompt: str | None) -> str:
    """The origin line; under it, for a chat that began from a summary, the summary (its system prompt), as text."""
    if o.how != "summary" or not system_prompt:
        return origin_text(o)
    return f"{origin_text(o)}\nIts system prompt, which the model sees (Ctrl+O edits it):\n{safe_text(system_prompt)}"
