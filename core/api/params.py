"""The sampling parameters of one request (torch-free: the engine draws with them in core/model/sampling.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass


MAX_TOKENS_LIMIT = 1 << 20  # no context window is longer; also what a settings row can store
GREEDY_BELOW = 1e-5  # a temperature this small is greedy: dividing logits by it would overflow fp32


def _real(name: str, value: object, remedy: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number ({remedy}), got {value!r}")
    return float(value)


def _whole(name: str, value: object, low: int, high: int, remedy: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high} ({remedy}), got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """temperature 0 (or below 1e-5) means greedy (argmax); top_k 0 and top_p 1.0 mean off.

    Every field is checked when the object is made: a bad value raises ValueError saying what to use.
    """

    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 512
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        temperature = _real("temperature", self.temperature, "0 = greedy, e.g. 0.7")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy, e.g. 0.7), got {self.temperature!r}")
        top_p = _real("top_p", self.top_p, "in (0, 1]; 1 = off, e.g. 0.9")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 = off, e.g. 0.9), got {self.top_p!r}")
        _whole("top_k", self.top_k, 0, 1 << 31, "0 = off, e.g. 40")
        _whole("max_tokens", self.max_tokens, 1, MAX_TOKENS_LIMIT, "how many tokens a reply may have, e.g. 512")
        if self.seed is not None:
            _whole("seed", self.seed, 0, (1 << 64) - 1, "leave it unset for a random one")
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not isinstance(stop, (tuple, list)) or not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "temperature", temperature)
        object.__setattr__(self, "top_p", top_p)
        object.__setattr__(self, "stop", tuple(stop))

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW
