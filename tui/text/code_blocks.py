"""The fenced code blocks of a reply, as a copy action puts them on the clipboard.

The blocks are found by the same Markdown parser (markdown-it, "gfm-like") that renders the reply, so
the n-th block here is the n-th code block on screen: backtick and tilde fences, longer fences around
shorter ones, fences inside lists, and an unclosed fence (a reply still streaming, or cut) that runs to
the end. A block's code is the text between its fence lines, without the fences or the language tag,
and with control characters removed: C0 and C1 controls and DEL (newline and tab stay, CRLF becomes
LF) and the bidirectional overrides (they make code read differently from what it does), so a paste
into a terminal or an editor gets exactly the code that was shown.

The parser reads the reply with each removed character replaced by one placeholder that never occurs in
text, so block boundaries fall where they fall on screen (where those characters show as visible
symbols); the placeholders are then dropped from the code.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt

_PLACEHOLDER = "\uffff"  # a Unicode noncharacter: not text, so removing it loses nothing
_REMOVED = [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0),
            *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_MASK = {c: _PLACEHOLDER for c in _REMOVED}


@dataclass(slots=True, frozen=True)
class CodeBlock:
    language: str  # the first word of the fence's info string, "" when it has none
    code: str


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("gfm-like")


def strip_controls(text: str) -> str:
    """`text` without control characters (newline and tab kept; CRLF -> LF)."""
    return text.replace("\r\n", "\n").translate(_MASK).replace(_PLACEHOLDER, "")


def code_blocks(markdown: str) -> list[CodeBlock]:
    """Every fenced code block of `markdown`, in order (see the module doc for what `code` holds)."""
    masked = markdown.replace("\r\n", "\n").translate(_MASK)
    blocks = []
    for token in _parser().parse(masked):
        if token.type == "fence":
            code = token.content[:-1] if token.content.endswith("\n") else token.content  # (the closing line's \n)
            info = token.info.replace(_PLACEHOLDER, "").split()
            blocks.append(CodeBlock(info[0] if info else "", code.replace(_PLACEHOLDER, "")))
    return blocks
