"""Which drafted tokens the target keeps: exact greedy identity and the standard rejection rule.

The target scored a sequence's k drafted tokens d_1..d_k in one forward: row i of its logits is the
target's next-token distribution p_i after the context plus d_1..d_i (row 0: after the context alone).

- Greedy: d_i is kept while it equals the argmax of row i-1; then the argmax of the first row not
  matched (or of the last row) is emitted. That is token for token what one-at-a-time decoding emits.
- Sampling (Leviathan et al. 2023; Chen et al. 2023): d_i, drawn from the draft's q_{i-1}, is kept
  with probability min(1, p(d_i) / q(d_i)); at the first rejection a token is drawn from
  normalise(max(0, p - q)) and the step ends; when every draft is kept, one more token is drawn from
  the last row. Each emitted token is then distributed exactly as the target's p.
  A deterministic draft (prompt lookup) has q one-hot at d_i: keep d_i with probability p(d_i), and on
  rejection draw from p without d_i.
p is the target's distribution after the request's own temperature, top-k and top-p (filtered_probs).
"""
from __future__ import annotations

import torch

from ...model.sampling import SamplingError, SamplingParams, filtered_probs, greedy_of_damaged_row, sample, sample_each


def verify_drafts(logits: torch.Tensor, draft_ids: list[int], draft_probs: torch.Tensor | None,
                  params: SamplingParams, generator: torch.Generator | None) -> list[int]:
    """The kept drafts followed by one token from the target. logits `[k + 1, vocab]`; draft_probs
    `[k, vocab]`, the draft's q for each drafted token, or None for a deterministic (one-hot) draft."""
    k = len(draft_ids)
    assert logits.shape[0] == k + 1 and (draft_probs is None or draft_probs.shape[0] >= k)
    if params.greedy:
        if torch.isfinite(logits).all():
            best = torch.argmax(logits, dim=-1).tolist()
        else:  # torch.argmax would pick a NaN; a row with no finite logit raises SamplingError
            best = [greedy_of_damaged_row(row) for row in logits]
        kept = 0
        while kept < k and draft_ids[kept] == best[kept]:
            kept += 1
        return [*draft_ids[:kept], best[kept]]
    out: list[int] = []
    for i, d in enumerate(draft_ids):
        p = filtered_probs(logits[i].cpu(), params)
        q_d = 1.0 if draft_probs is None else float(draft_probs[i, d])
        u = float(torch.rand((), generator=generator))
        if q_d > 0 and u * q_d < float(p[d]):  # u < p(d) / q(d): kept
            out.append(d)
            continue
        if draft_probs is None:
            residual = p.clone()
            residual[d] = 0.0
        else:
            residual = (p - draft_probs[i].cpu().float()).clamp_min_(0.0)
        total = float(residual.sum())
        residual = residual / total if total > 0 else p  # total 0 only when p == q, where rejection has probability 0
        out.append(int(torch.multinomial(residual, 1, generator=generator)))
        return out
    out.extend(sample(logits[k:], [params], [generator]))
    return out


def sample_spans(logits: torch.Tensor, spans: list[tuple[int, int]], seqs: list
                 ) -> tuple[list[list[int]], dict[int, str]]:
    """New tokens per sequence, and the sequences (by index) whose sampling failed, with the reason: a bad
    row ends only its own request. logits `[num_rows, vocab]` hold, for each sequence in turn, num_rows rows
    (spans: (first row, num_rows)); num_rows 0: still prefilling, 1: an ordinary next token (sample()),
    more: num_rows - 1 drafted tokens to verify."""
    out: list[list[int]] = [[] for _ in seqs]
    failed: dict[int, str] = {}
    plain = [i for i, (_, n) in enumerate(spans) if n == 1]
    if plain:
        rows = [spans[i][0] for i in plain]
        tokens = sample_each(logits[rows], [seqs[i].params for i in plain], [seqs[i].generator for i in plain])
        for i, token in zip(plain, tokens):
            if isinstance(token, SamplingError):
                failed[i] = str(token)
            else:
                out[i] = [token]
    for i, ((first, n), seq) in enumerate(zip(spans, seqs)):
        if n > 1:
            try:
                out[i] = verify_drafts(logits[first : first + n], seq.draft_ids[: n - 1], seq.draft_probs,
                                       seq.params, seq.generator)
            except (ValueError, RuntimeError) as e:  # torch.multinomial refuses a vector summing to 0
                failed[i] = str(e) if isinstance(e, SamplingError) else f"sampling failed: {e}"
    return out, failed
