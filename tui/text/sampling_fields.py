"""The text of the settings dialog's top-k, seed and stop-string fields <-> values, checked.

Each parse_* raises ValueError with the one line the dialog shows. Stop strings are written one per line;
a stop string that holds a line break or a tab is written with the escapes \\n and \\t (and a backslash as \\\\),
so "\\n\\n" stops a reply at its first blank line.
"""
from __future__ import annotations

from ...core.chats.conversation import MAX_SEED, MAX_STOP_STRINGS

MAX_STOP_CHARS = 100
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def parse_top_k(raw: str) -> int:
    """'' or '0': off; else a whole number >= 1."""
    raw = raw.strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"top-k must be a whole number >= 0 (0 or empty: off), got {raw!r}")
    return value


def parse_seed(raw: str) -> int | None:
    """'': no seed (a fresh random stream per reply); else a whole number from 0 to 2**63 - 1."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"seed must be a whole number from 0 to {MAX_SEED} (empty: random), got {raw!r}")
    return value


def _unescape(line: str, number: int) -> str:
    out, i = [], 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            nxt = line[i + 1] if i + 1 < len(line) else ""
            if nxt not in _ESCAPES:
                raise ValueError(f"stop string {number}: unknown escape \\{nxt} (use \\n, \\t or \\\\)")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_stop_lines(text: str) -> tuple[str, ...]:
    """One stop string per non-blank line, escapes resolved; at most MAX_STOP_STRINGS of MAX_STOP_CHARS each."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_STOP_STRINGS:
        raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings (one per line), got {len(lines)}")
    stop = []
    for number, line in enumerate(lines, start=1):
        value = _unescape(line, number)
        if len(value) > MAX_STOP_CHARS:
            raise ValueError(f"stop string {number} is {len(value)} characters; at most {MAX_STOP_CHARS}")
        stop.append(value)
    return tuple(dict.fromkeys(stop))  # (a repeat adds nothing)


def stop_lines(stop: tuple[str, ...]) -> str:
    """The field's text for these stop strings (parse_stop_lines reads it back to the same tuple)."""
    return "\n".join(s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t") for s in stop)


def sampling_extras(settings) -> list[str]:
    """The header's words for the settings that are not at their defaults (top-k, seed, stop strings)."""
    parts = [f"top-k {settings.top_k}"] if settings.top_k else []
    parts += [f"seed {settings.seed}"] if settings.seed is not None else []
    n = len(settings.stop)
    return parts + ([f"{n} stop string{'s' if n > 1 else ''}"] if n else [])
