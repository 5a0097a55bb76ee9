"""The context map's text (issue 27 item 6; F10 or the palette): each message's share of the chat's context,
its blocks by where they are now (█ in memory, ▒ on disk only, · gone: computed again next turn), and which
messages a trim to fit the next turn would drop (the oldest turns first; the system prompt stays).
"""
from __future__ import annotations

from ...core.chats.conversation import Conversation
from ...core.inspect.context_map import DISK, GONE, MEMORY

GLYPHS = {MEMORY: "█", DISK: "▒", GONE: "·"}
BAR_CELLS = 24  # the widest block bar of a message; longer ones are scaled


def _bar(tiers: list[str]) -> str:
    if len(tiers) > BAR_CELLS:  # one cell per several blocks: the worst of them (gone < disk < memory)
        step = len(tiers) / BAR_CELLS
        rank = {GONE: 0, DISK: 1, MEMORY: 2}
        tiers = [min(tiers[int(i * step):max(int(i * step) + 1, int((i + 1) * step))], key=rank.__getitem__)
                 for i in range(BAR_CELLS)]
    return "".join(GLYPHS[t] for t in tiers)


def trimmed_messages(chat: Conversation, context: int, max_tokens: int) -> list[int]:
    """Indices of the messages a trim drops so the next turn fits (its reply's max_tokens included): whole turns,
    oldest first. Empty when the chat fits."""
    spans = [m.token_span for m in chat.messages]
    total = len(chat.token_ids)
    dropped: list[int] = []
    i = 0
    while total + max_tokens > context and i < len(chat.messages):
        span = spans[i]
        if span is not None:
            total -= span[1] - span[0]
        dropped.append(i)
        i += 1
    return dropped


def context_map_text(chat: Conversation, tiers: list[str], context: int | None, block_size: int) -> str:
    total = len(chat.token_ids)
    if not total:
        return "This chat has no tokens yet: its first turn computes everything."
    lines = [f"{total:,} tokens" + (f" of a {context:,}-token context ({total / context:.0%})" if context else "")
             + f" · {tiers.count(MEMORY)} blocks in memory, {tiers.count(DISK)} on disk only, "
             f"{tiers.count(GONE)} gone", ""]
    spans = [(m.token_span, m) for m in chat.messages]
    first = next((s[0] for s, _ in spans if s is not None), total)
    # the first turn's prompt holds the template's opening and the system prompt with the first message
    rows = [("template + system prompt", (0, first), None)] if first > 0 else []
    rows += [(f"#{i + 1} {m.role}: {m.content[:28].replace(chr(10), ' ')}", s, i) for i, (s, m) in enumerate(spans)]
    dropped = set(trimmed_messages(chat, context, chat.settings.max_tokens)) if context else set()
    for label, span, index in rows:
        if span is None:
            lines.append(f"{label:<42} (its tokens are not known: tokenized afresh next turn)")
            continue
        start, end = span
        blocks = tiers[start // block_size:(end + block_size - 1) // block_size]
        share = f"{(end - start) / total:>4.0%}"
        mark = "  ← a trim drops it" if index in dropped else ""
        lines.append(f"{label:<42} {end - start:>6,} {share} {_bar(blocks)}{mark}")
    lines.append("")
    lines.append("a trim would drop nothing: the next turn fits" if not dropped else
                 f"a trim to fit the next turn (its {chat.settings.max_tokens:,} reply tokens) drops the oldest "
                 f"{len(dropped)} messages; the system prompt's blocks stay cached")
    lines.append("█ in memory  ▒ on disk only  · gone (computed again); a message's tokens include its template "
                 "text (the first one's: the system prompt too)")
    return "\n".join(lines)
