"""Stop strings over a stream of text deltas: emit what is safe, hold back what may still become a stop string."""
from __future__ import annotations


class StopStringMatcher:
    """feed(delta) -> (text safe to show, stopped). The stop string itself is never shown."""

    def __init__(self, stop: tuple[str, ...]) -> None:
        self.stop = tuple(s for s in stop if s)
        self.pending = ""  # text held back because a stop string may start in it
        self.stopped = False

    def feed(self, delta: str) -> tuple[str, bool]:
        assert not self.stopped, "feed after a stop string matched"
        if not self.stop:
            return delta, False
        text = self.pending + delta
        hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.pending, self.stopped = "", True
            return text[: min(hits)], True
        keep = self._longest_partial_match(text)
        self.pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], False

    def flush(self) -> str:
        """At the end of the stream: whatever was held back is plain text after all."""
        text, self.pending = self.pending, ""
        return text

    def _longest_partial_match(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of some stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:n]):
                    best = n
                    break
        return best
