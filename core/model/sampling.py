"""How the next token is chosen: sample() for SamplingParams (core/api/params.py), and its random stream."""
from __future__ import annotations

import torch

from ..api.params import SamplingParams

NO_FINITE_LOGITS = ("the model produced no finite logits for this request (a numerical failure in the model); "
                    "try another --dtype or device")


class SamplingError(ValueError):
    """A row that could not be sampled: no finite logits, or a probability vector that is not a distribution."""


def make_generator(params: SamplingParams) -> torch.Generator | None:
    """The per-request random stream: seeded when a seed is given, so a reply can be reproduced."""
    if params.greedy:
        return None
    gen = torch.Generator()
    if params.seed is None:
        gen.seed()
    else:
        gen.manual_seed(params.seed)
    return gen


def filtered_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p (nucleus) filtering. logits `[vocab]`, fp32.

    Always finite and summing to 1 for a non-greedy `params`: NaN logits count as -inf, +inf as the largest
    float, and the logits are shifted so their maximum is 0 before the temperature divides them.
    """
    logits = torch.nan_to_num(logits.float(), nan=float("-inf"), posinf=torch.finfo(torch.float32).max)
    top = logits.max()
    if not torch.isfinite(top):
        raise SamplingError(NO_FINITE_LOGITS)
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
    """One next token per row of logits `[num_seqs, vocab]`; each row uses its own params and random stream.
    Raises SamplingError for the first row that cannot be sampled (sample_each() isolates rows)."""
    out = sample_each(logits, params, generators)
    for token in out:
        if isinstance(token, SamplingError):
            raise token
    return out


def sample_each(logits: torch.Tensor, params: list[SamplingParams],
                generators: list[torch.Generator | None]) -> list[int | SamplingError]:
    """sample(), row by row isolated: a row that fails gives its SamplingError and the others their tokens.
    Fast path: one argmax for every greedy row when all logits are finite; otherwise a greedy row ignores
    NaN (as filtered_probs does) and fails only when it has no finite logit at all."""
    assert logits.shape[0] == len(params) == len(generators)
    all_finite = bool(torch.isfinite(logits).all())
    greedy_ids = torch.argmax(logits, dim=-1).tolist()
    out: list[int | SamplingError] = []
    for row, (p, gen) in enumerate(zip(params, generators)):
        try:
            if p.greedy:
                out.append(greedy_ids[row] if all_finite else greedy_of_damaged_row(logits[row]))
            else:
                probs = filtered_probs(logits[row].cpu(), p)
                out.append(int(torch.multinomial(probs, 1, generator=gen).item()))
        except (ValueError, RuntimeError) as e:  # RuntimeError: torch.multinomial refuses a vector summing to 0
            out.append(e if isinstance(e, SamplingError) else SamplingError(f"sampling failed: {e}"))
    return out


def greedy_of_damaged_row(row: torch.Tensor) -> int:
    """argmax of a row with NaN or inf in it (torch.argmax would pick a NaN)."""
    row = torch.nan_to_num(row.float(), nan=float("-inf"), posinf=torch.finfo(torch.float32).max)
    if not torch.isfinite(row.max()):
        raise SamplingError(NO_FINITE_LOGITS)
    return int(torch.argmax(row))
