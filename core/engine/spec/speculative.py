"""Speculative decoding in the paged engine: before a step, decoding sequences get drafted tokens; the
step verifies them in the same forward as everything else; after it, rejected tokens are rolled back.

- propose(): a decoding sequence (all its tokens but the last computed) gets up to k drafted tokens in
  seq.draft_ids, k chosen per sequence from its recent acceptance (AdaptiveK). The scheduler counts them
  as extra tokens of that sequence (without preempting anyone for them), the runner feeds them after the
  last token and returns the kept ones plus one more token (core/engine/spec/verify.py).
- settle(): the K/V of rejected tokens is never counted as computed, the blocks only they used are
  freed, and block hashes are registered for kept tokens only. The kept tokens then stream through the
  engine's usual per-token path (EOS, stop strings and max_tokens cut them exactly where one-at-a-time
  decoding would stop).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..block_manager import BlockManager
from ...config import EngineConfig
from .draft import DraftModelProposer, NgramProposer, ProposerState, check_same_vocabulary
from ...model.loader import LoadedModel, load_model
from ..scheduler import ScheduledBatch
from ..sequence import Sequence


class AdaptiveK:
    """How many tokens to draft for one sequence, from how many of its recent drafts the target kept.

    All kept: draft more next time (up to max_k); some rejected: draft just past what was kept. When the
    smoothed acceptance falls below `min_acceptance`, drafting pauses for a number of decode steps that
    doubles each time it is still poor when retried (up to `max_pause`), so a sequence whose drafts keep
    failing soon pays almost nothing for them; a good retry resets the pause. The threshold is low (30%)
    because a verify step within the decode-row budget costs about a plain step; prompt lookup proposes
    nothing where nothing matches, which is the main gate (measured: 0.3 kept as many tokens per forward as
    never pausing, 0.5 fewer, on the bench's workloads).
    """

    def __init__(self, max_k: int, min_acceptance: float = 0.3, max_pause: int = 64) -> None:
        self.max_k = max_k
        self.k = max(1, max_k // 2)
        self.acceptance = 0.5  # smoothed fraction of drafted tokens kept
        self.min_acceptance = min_acceptance
        self.max_pause = max_pause
        self.pause = 0  # decode steps left without drafting
        self.next_pause = 1

    def next_k(self) -> int:
        if self.pause > 0:
            self.pause -= 1
            return 0
        return self.k

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        self.k = min(self.max_k, self.k + 2) if num_accepted == num_drafted else max(1, num_accepted + 1)
        self.acceptance = 0.6 * self.acceptance + 0.4 * num_accepted / num_drafted
        if self.acceptance < self.min_acceptance:
            self.pause = self.next_pause
            self.next_pause = min(2 * self.next_pause, self.max_pause)
            self.acceptance = self.min_acceptance  # the retry gets a fair chance
        elif num_accepted:
            self.next_pause = 1


@dataclass(slots=True)
class SpecState:
    """Per sequence: its k controller and its proposer's state."""

    k: AdaptiveK
    proposer: ProposerState = field(default_factory=ProposerState)


@dataclass(slots=True)
class SpecStep:
    """What speculation did in one step (for the stats window)."""

    num_drafted: int = 0  # drafted tokens verified
    num_accepted: int = 0  # of them, kept
    drafting: list[bool] = field(default_factory=list)  # per batch sequence: did it verify drafts


# The decode rows of one step (one per decoding sequence, plus its drafted tokens) up to which a forward costs
# about what one row costs: the weights are read once for all rows. Measured on an AVX-512 AMD EPYC, 2 threads,
# the default model with prepacked fp32 weights (kernels/linear.py): 1 to 5 rows cost the same, 9 rows ~1.35x.
# Drafts beyond this budget would make every sequence of the step pay; the budget goes to the sequences
# whose drafts have been kept most.
MAX_DECODE_ROWS = 6


class Speculator:
    def __init__(self, block_manager: BlockManager, max_k: int, max_context: int,
                 proposer: NgramProposer | DraftModelProposer | None = None,
                 max_decode_rows: int = MAX_DECODE_ROWS) -> None:
        self.block_manager = block_manager
        self.max_k = max_k
        self.max_context = max_context
        self.proposer = proposer or NgramProposer()
        self.max_decode_rows = max_decode_rows

    @property
    def enabled(self) -> bool:
        return self.max_k > 0

    def propose(self, running: list[Sequence]) -> None:
        """Drafted tokens for decoding sequences that have a good chance of keeping some, within the step's
        budget of decode rows (best recent acceptance first)."""
        decoding: list[Sequence] = []
        for seq in running:
            seq.draft_ids, seq.draft_probs = [], None
            if self.enabled and seq.num_computed_tokens == seq.num_tokens - 1:  # (not prefilling or waiting)
                if seq.spec is None:
                    seq.spec = SpecState(AdaptiveK(self.max_k))
                decoding.append(seq)
        budget = self.max_decode_rows - len(decoding)
        for seq in sorted(decoding, key=lambda s: -s.spec.k.acceptance):
            state: SpecState = seq.spec
            room = min(seq.params.max_tokens - seq.num_output_tokens, self.max_context - seq.num_tokens) - 1
            k = min(state.k.next_k(), room, budget)  # the kept drafts plus one token must fit
            if k > 0:
                seq.draft_ids, seq.draft_probs = self.proposer.propose(seq, state.proposer, k)
                budget -= len(seq.draft_ids)

    def settle(self, batch: ScheduledBatch, outputs: list[list[int]],
               postprocess: Callable[[ScheduledBatch], None]) -> SpecStep:
        """After the forward: count only verified tokens as computed, then run `postprocess` (which marks
        them computed and registers full blocks) while the kept drafts sit in token_ids, free the slots of
        rejected ones, and take the kept drafts out again: the caller appends outputs token by token."""
        step = SpecStep()
        kept: list[tuple[Sequence, int]] = []
        for i, (seq, out) in enumerate(zip(batch.seqs, outputs)):
            num_drafted = max(0, seq.num_computed_tokens + batch.num_new_tokens[i] - seq.num_tokens)
            seq.draft_ids, seq.draft_probs = [], None
            step.drafting.append(num_drafted > 0)
            if out:
                seq.timings.num_forwards += 1
            if not num_drafted:
                continue
            num_accepted = len(out) - 1
            assert 0 <= num_accepted <= num_drafted
            batch.num_new_tokens[i] -= num_drafted - num_accepted  # rejected: their K/V does not count
            seq.token_ids.extend(out[:-1])
            kept.append((seq, num_accepted))
            seq.spec.k.observe(num_drafted, num_accepted)
            seq.timings.num_draft_tokens += num_drafted
            seq.timings.num_accepted_tokens += num_accepted
            step.num_drafted += num_drafted
            step.num_accepted += num_accepted
        postprocess(batch)
        for seq, num_accepted in kept:
            del seq.token_ids[len(seq.token_ids) - num_accepted :]
            self.block_manager.free_tail(seq, seq.num_computed_tokens + 1)  # room for the token sampled now
        return step


def build_speculator(config: EngineConfig, target: LoadedModel, block_manager: BlockManager, max_context: int,
                     draft: LoadedModel | None = None) -> Speculator:
    """Prompt lookup by default; a draft model when one is given or configured (config.draft_model).
    config.num_speculative_tokens 0 turns speculation off."""
    if draft is None and config.draft_model and config.num_speculative_tokens:
        draft = load_model(config.draft_model, config.device, target.dtype, weight_dtype=config.weight_dtype)
    proposer: NgramProposer | DraftModelProposer = NgramProposer()
    if draft is not None:
        check_same_vocabulary(target, draft, config.draft_model or str(draft.folder))
        proposer = DraftModelProposer(draft)
    return Speculator(block_manager, config.num_speculative_tokens, max_context, proposer)
