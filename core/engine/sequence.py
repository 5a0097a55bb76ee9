"""One request as the engine sees it: its token ids, how far they are computed, and its KV blocks."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from ..api.events import FinishReason
from ..api.metrics import RequestTimings
from ..api.params import SamplingParams


WARM_REQUEST_ID = -1  # a draft prefilled while the user types (core/engine/warming.py): no request, no events


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    request_id: int
    token_ids: list[int]
    num_prompt_tokens: int
    params: SamplingParams
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)  # hash chain of the full blocks of token_ids
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    num_cached_tokens: int = -1  # prompt tokens reused from the prefix cache at first admission (-1: not yet)
    num_disk_tokens: int = 0  # of those, how many the disk tier supplied
    num_preemptions: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    finish_reason: FinishReason | None = None
    timings: RequestTimings = field(default_factory=RequestTimings)
    generator: torch.Generator | None = None
    draft_ids: list[int] = field(default_factory=list)  # speculative tokens proposed for this step (core/engine/spec/speculative.py)
    draft_probs: torch.Tensor | None = None  # [len(draft_ids), vocab]: the draft model's q; None for a one-hot draft
    spec: object | None = None  # the speculator's per-sequence state (SpecState)
    num_disk_failed_blocks: int = 0  # disk entries matched at admission that failed to load (bad: removed)
    use_prefix_cache: bool = True  # False: computed from scratch and never cached (the cache exactness check)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_warm(self) -> bool:
        return self.request_id == WARM_REQUEST_ID

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
