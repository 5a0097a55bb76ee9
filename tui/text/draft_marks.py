"""The view a reply gets while "Mark accepted drafts" is on: plain text (no Markdown), with the characters of
drafted tokens the model kept (speculative decoding; Message.draft_spans) underlined, so a user sees where
drafts paid. Each piece goes through safe_text on its own, so the spans' offsets stay those of the raw text."""
from __future__ import annotations

from textual.content import Content

from .format import cut_for_display
from ...core.text.sanitize import safe_text

DRAFT_STYLE = "underline bold $success"


def marked_reply(text: str, draft_spans: list[tuple[int, int]]) -> Content:
    head, note = cut_for_display(text)  # the same cut as the Markdown view
    limit = len(head)
    parts: list[str | tuple[str, str]] = []
    pos = 0
    for start, end in draft_spans:
        start, end = max(start, pos), min(end, limit)
        if start >= end:
            continue
        if start > pos:
            parts.append(safe_text(text[pos:start]))
        parts.append((safe_text(text[start:end]), DRAFT_STYLE))
        pos = end
    parts.append(safe_text(text[pos:limit]) + note)
    return Content.assemble(*parts)


def drafted_share(text: str, draft_spans: list[tuple[int, int]]) -> str:
    """The footer line "underlined: drafted and kept, 38% of the text" (empty when no draft was kept)."""
    num_drafted = sum(min(end, len(text)) - start for start, end in draft_spans if start < len(text))
    if not text or not num_drafted:
        return ""
    return f"underlined: drafted and kept, {num_drafted / len(text):.0%} of the text"
