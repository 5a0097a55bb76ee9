"""How the next token is chosen: SamplingParams and sample()."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


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

    def make_generator(self) -> torch.Generator | None:
        """The per-request random stream: seeded when a seed is given, so a reply can be reproduced."""
        if self.greedy:
            return None
        gen = torch.Generator()
        if self.seed is None:
            gen.seed()
        else:
            gen.manual_seed(self.seed)
        return gen


def filtered_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p (nucleus) filtering. logits `[vocab]`, fp32.

    Always finite and summing to 1 for a non-greedy `params`: NaN logits count as -inf, +inf as the largest
    float, and the logits are shifted so their maximum is 0 before the temperature divides them.
    """
    logits = torch.nan_to_num(logits.float(), nan=float("-inf"), posinf=torch.finfo(torch.float32).max)
    top = logits.max()
    if not torch.isfinite(top):
        raise ValueError("the model produced no finite logits for this request (a numerical failure in the model); "
                         "try another --dtype or device")
    logits = (logits - top) / params.temperature  # the maximum stays exactly 0, so softmax cannot overflow
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        drop_sorted = cumulative - sorted_probs >= params.top_p  # keep the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum()
    return probs


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]) -> list[int]:
    """One next token per row of logits `[num_seqs, vocab]`; each row uses its own params and random stream."""
    assert logits.shape[0] == len(params) == len(generators)
    greedy_ids = torch.argmax(logits, dim=-1).tolist()
    out = []
    for row, (p, gen) in enumerate(zip(params, generators)):
        if p.greedy:
            out.append(greedy_ids[row])
        else:
            probs = filtered_probs(logits[row].cpu(), p)
            out.append(int(torch.multinomial(probs, 1, generator=gen).item()))
    return out
