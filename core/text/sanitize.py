"""Text from a model or a paste, made safe to show: control codes become visible, harmless characters.

Every string that reaches a widget goes through `safe_text`, and so does `llmchat ask` output (unless
`--raw` and stdout is not a terminal), through `SafeTextStream`, which handles a CRLF split across deltas. Markup is never parsed from it (widgets
get Content/Markdown text, never a markup string), and this function removes the other danger: bytes
that a terminal would obey. C0 controls (ESC, BEL, BS, CR, ...) and DEL become their Unicode control
pictures (ESC -> "␛", so a CSI "ESC [ 2 J" shows as "␛[2J"); C1 controls (U+0080-U+009F, which
include the 8-bit CSI, OSC and DCS) and the bidirectional override/isolate controls (which can make
text read differently from what it is) become escapes such as "\\x9b" or "\\u202e". Newline and tab
stay. CRLF becomes LF.
"""
from __future__ import annotations

_KEEP = {0x09, 0x0A}
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]

_TABLE: dict[int, str] = {c: chr(0x2400 + c) for c in range(0x20) if c not in _KEEP}
_TABLE[0x7F] = "\u2421"  # ␡
_TABLE.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})
_TABLE.update({c: f"\\u{c:04x}" for c in _BIDI})


def safe_text(text: str) -> str:
    """`text` with every terminal control code replaced by visible literal characters (see module doc)."""
    return text.replace("\r\n", "\n").translate(_TABLE)


def is_safe(text: str) -> bool:
    """True when `text` has nothing `safe_text` would change (for tests and asserts)."""
    return not any(ord(ch) in _TABLE for ch in text)


class SafeTextStream:
    """`safe_text` over a stream of deltas: a CR at the end of a delta waits to see whether an LF follows."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, delta: str) -> str:
        text, self._held = self._held + delta, ""
        if text.endswith("\r"):
            text, self._held = text[:-1], "\r"
        return safe_text(text)

    def flush(self) -> str:
        text, self._held = self._held, ""
        return safe_text(text)
