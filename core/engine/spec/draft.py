"""Where drafted tokens come from: prompt lookup (n-grams of the sequence's own tokens) or a draft model.

A proposer gives up to k tokens that may follow a sequence, and for a sampled draft the distribution q
each was drawn from. The target verifies them (core/engine/spec/verify.py); a wrong draft costs time, never
correctness. Per-sequence state lives on the sequence (seq.spec, see core/engine/spec/speculative.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...model.dense import DenseKV
from ...model.loader import LoadedModel
from ...model.sampling import filtered_probs
from ..sequence import Sequence

Draft = tuple[list[int], torch.Tensor | None]  # drafted ids, and q `[len(ids), vocab]` (None: deterministic)


class NgramIndex:
    """For each n-gram of a sequence (min_n <= n <= max_n), the position of the token that followed its most
    recent occurrence. Grows incrementally: every token is indexed once."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.sizes = range(max_n, min_n - 1, -1)  # longest first: the most specific match wins
        self.follower: dict[tuple[int, ...], int] = {}
        self.num_indexed = 1  # positions j < num_indexed have been indexed as followers

    def extend(self, token_ids: list[int]) -> None:
        for j in range(self.num_indexed, len(token_ids)):
            for n in self.sizes:
                if j >= n:
                    self.follower[tuple(token_ids[j - n : j])] = j
        self.num_indexed = max(self.num_indexed, len(token_ids))

    def continuation(self, token_ids: list[int], k: int) -> list[int]:
        """Up to k tokens that followed the longest earlier occurrence of the sequence's last n tokens; the
        match continues periodically past the end (a repeated phrase keeps repeating)."""
        self.extend(token_ids)
        num_tokens = len(token_ids)
        for n in self.sizes:
            if num_tokens <= n:
                continue
            start = self.follower.get(tuple(token_ids[num_tokens - n :]))
            if start is not None:
                out: list[int] = []
                for i in range(k):
                    pos = start + i
                    out.append(token_ids[pos] if pos < num_tokens else out[pos - num_tokens])
                return out
        return []


class NgramProposer:
    """Prompt lookup: drafts copied from the sequence's own context (the prompt and the reply so far)."""

    def __init__(self, min_n: int = 2, max_n: int = 5) -> None:
        self.min_n, self.max_n = min_n, max_n

    def propose(self, seq: Sequence, state: "ProposerState", k: int) -> Draft:
        if state.ngram is None:
            state.ngram = NgramIndex(self.min_n, self.max_n)
        return state.ngram.continuation(seq.token_ids, k), None


@dataclass(slots=True)
class DraftModelCache:
    """The draft model's own contiguous K/V for one sequence, and the ids it holds K/V for."""

    kv: DenseKV
    fed_ids: list[int] = field(default_factory=list)


@dataclass(slots=True)
class ProposerState:
    ngram: NgramIndex | None = None
    draft_cache: DraftModelCache | None = None


class DraftModelProposer:
    """A smaller model with the same vocabulary drafts k tokens one at a time, greedily or sampled with the
    request's own settings (its q kept for the rejection rule). It catches up on the sequence's tokens it
    has not seen (the prompt, then each step's kept tokens); what it drafted and the target rejected is
    dropped from its cache by comparing its ids with the sequence's."""

    def __init__(self, draft: LoadedModel) -> None:
        self.draft = draft
        self.model = draft.model
        self.max_positions = draft.config.max_position_embeddings

    def propose(self, seq: Sequence, state: ProposerState, k: int) -> Draft:
        k = min(k, self.max_positions - seq.num_tokens - 1)
        if k <= 0:
            return [], None
        cache = state.draft_cache
        if cache is None:
            max_len = min(self.max_positions, seq.num_prompt_tokens + seq.params.max_tokens + k + 1)
            cache = state.draft_cache = DraftModelCache(DenseKV(self.model, max(max_len, seq.num_tokens + k)))
        if cache.kv.k[0].shape[0] < seq.num_tokens + k:  # longer than planned (it cannot be, but never overrun)
            return [], None
        valid = 0
        fed, ids = cache.fed_ids, seq.token_ids
        limit = min(len(fed), len(ids) - 1)
        while valid < limit and fed[valid] == ids[valid]:
            valid += 1
        del fed[valid:]
        cache.kv.start = valid
        return self._draft(seq, cache, ids[valid:], k)

    @torch.inference_mode()
    def _draft(self, seq: Sequence, cache: DraftModelCache, new_ids: list[int], k: int) -> Draft:
        device = self.model.device
        drafted: list[int] = []
        probs: list[torch.Tensor] = []
        for _ in range(k):
            start = cache.kv.start
            positions = torch.arange(start, start + len(new_ids), device=device)
            hidden = self.model(torch.tensor(new_ids, device=device), positions, cache.kv)
            cache.kv.start += len(new_ids)
            cache.fed_ids.extend(new_ids)
            logits = self.model.compute_logits(hidden[-1:])[0].cpu()  # [vocab]
            if seq.params.greedy:
                token = int(torch.argmax(logits))
            else:
                q = filtered_probs(logits, seq.params)
                token = int(torch.multinomial(q, 1, generator=seq.generator))
                probs.append(q)
            drafted.append(token)
            new_ids = [token]
        return drafted, torch.stack(probs) if probs else None


def check_same_vocabulary(target: LoadedModel, draft: LoadedModel, name: str) -> None:
    """A draft must number tokens exactly as the target does; raise with the remedy otherwise."""
    sizes = (target.config.vocab_size, draft.config.vocab_size)
    same = sizes[0] == sizes[1] and target.tokenizer.vocab_size == draft.tokenizer.vocab_size
    if same:
        same = target.tokenizer.vocab() == draft.tokenizer.vocab()
    if not same:
        raise ValueError(f"--draft-model {name} has another vocabulary than the model ({sizes[1]} vs {sizes[0]} "
                         "tokens, or the same ids for other tokens); use a draft from the same model family")
