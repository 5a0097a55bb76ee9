"""Reasoning (`<think>…</think>`, Qwen3 / DeepSeek-R1 style) told apart from the answer: the one place that
knows the tags.

A reply's raw text keeps its tags (the conversation's ids decode to it, and the chat template applies its own
rule to earlier turns' reasoning); what reads it splits it here:
- `ReasoningSplitter` takes text deltas as they stream and yields `(kind, text)` pieces, kind "reasoning" or
  "content"; a tag split across deltas is held back until it is whole (never shown half);
- `split_reasoning` is the same on a whole string (a stored reply);
- `opens_reasoning` says whether a prompt's generation prompt already opened `<think>` (DeepSeek-R1's and
  Qwen3 thinking templates do), so the reply begins inside reasoning;
- `ReasoningTagger` is the way back: a server's separate `reasoning_content` and `content` as tagged text.
"""
from __future__ import annotations

from collections.abc import Iterator

OPEN, CLOSE = "<think>", "</think>"
REASONING, CONTENT = "reasoning", "content"


def _held(text: str, tag: str) -> int:
    """How many trailing characters of `text` could be the start of `tag` (kept until the next delta)."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ReasoningSplitter:
    """Text deltas in, `(kind, text)` pieces out, tags removed; adjacent pieces of one kind are merged."""

    def __init__(self, inside: bool = False) -> None:
        self.inside = inside  # in a reasoning block now
        self.seen_reasoning = inside  # a reasoning block was opened (or the reply began in one)
        self._pending = ""  # a possible tag's start, held back

    def feed(self, delta: str) -> list[tuple[str, str]]:
        text, self._pending = self._pending + delta, ""
        out: list[tuple[str, str]] = []
        while text:
            tag = CLOSE if self.inside else OPEN
            i = text.find(tag)
            if i < 0:
                held = _held(text, tag)
                self._emit(out, text[: len(text) - held])
                self._pending = text[len(text) - held:]
                break
            self._emit(out, text[:i])
            text = text[i + len(tag):]
            self.inside = not self.inside
            self.seen_reasoning = True
        return out

    def flush(self) -> list[tuple[str, str]]:
        """The end of the reply: a held-back partial tag is plain text after all."""
        out: list[tuple[str, str]] = []
        self._emit(out, self._pending)
        self._pending = ""
        return out

    def _emit(self, out: list[tuple[str, str]], text: str) -> None:
        if not text:
            return
        kind = REASONING if self.inside else CONTENT
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))


def pieces(text: str, inside: bool = False) -> Iterator[tuple[str, str]]:
    """A whole string's `(kind, text)` pieces, in order (empty ones left out)."""
    pos = 0
    while True:
        tag = CLOSE if inside else OPEN
        i = text.find(tag, pos)
        end = len(text) if i < 0 else i
        if end > pos:
            yield (REASONING if inside else CONTENT), text[pos:end]
        if i < 0:
            return
        pos, inside = i + len(tag), not inside


def starts_inside(text: str) -> bool:
    """A stored reply that began inside reasoning (its prompt opened `<think>`): it closes before it opens."""
    close = text.find(CLOSE)
    return close >= 0 and not 0 <= text.find(OPEN) < close


def split_reasoning(text: str, inside: bool | None = None) -> tuple[str, str]:
    """(reasoning, content) of a whole reply; `inside` None: inferred (`starts_inside`)."""
    parts: dict[str, list[str]] = {REASONING: [], CONTENT: []}
    for kind, piece in pieces(text, starts_inside(text) if inside is None else inside):
        parts[kind].append(piece)
    return "".join(parts[REASONING]), "".join(parts[CONTENT])


def opens_reasoning(prompt_text: str) -> bool:
    """The prompt ends with an opened `<think>` (the generation prompt opened it): the reply begins inside."""
    return prompt_text.rstrip().endswith(OPEN)


class ReasoningTagger:
    """A server's separate reasoning and content deltas as one tagged text stream (what a local reply looks
    like), so that the same splitter reads both."""

    def __init__(self) -> None:
        self.inside = False

    def tagged(self, reasoning: str, content: str) -> str:
        out = []
        if reasoning:
            out.append(reasoning if self.inside else OPEN + reasoning)
            self.inside = True
        if content:
            out.append(CLOSE + content if self.inside else content)
            self.inside = False
        return "".join(out)
