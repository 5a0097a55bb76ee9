"""Every number the UI shows: per-request timings and engine-wide snapshots.

One clock everywhere: time.perf_counter(). TTFT = first token out - arrival (queue time included);
TPOT = (last token time - first token time) / (output tokens - 1).
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, field, fields

now = time.perf_counter


@dataclass(slots=True)
class RequestTimings:
    """Mutable while a request runs; frozen into RequestMetrics when it finishes."""

    arrival: float = field(default_factory=now)
    scheduled: float | None = None  # first step that computed any of its tokens
    first_token: float | None = None
    last_token: float | None = None
    num_output_tokens: int = 0
    num_forwards: int = 0  # steps that gave this request tokens (one, or several with speculative decoding)
    num_draft_tokens: int = 0  # speculative tokens drafted and verified
    num_accepted_tokens: int = 0  # of them, kept by the target

    def on_token(self, t: float | None = None) -> None:
        t = now() if t is None else t
        if self.first_token is None:
            self.first_token = t
        self.last_token = t
        self.num_output_tokens += 1

    def ttft(self) -> float:
        return self.first_token - self.arrival if self.first_token is not None else float("nan")

    def tpot(self) -> float:
        if self.num_output_tokens < 2 or self.first_token is None or self.last_token is None:
            return float("nan")
        return (self.last_token - self.first_token) / (self.num_output_tokens - 1)

    def queue_time(self) -> float:
        return self.scheduled - self.arrival if self.scheduled is not None else float("nan")


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens whose KV came from the prefix cache
    num_output_tokens: int
    queue_time: float  # seconds from arrival to first scheduled step
    ttft: float  # seconds; NaN when no token came out
    tpot: float  # seconds per output token after the first; NaN with fewer than 2 tokens
    num_preemptions: int = 0
    load_seconds: float = 0.0  # model load time, for one-shot commands that include it
    num_disk_tokens: int = 0  # of num_cached_tokens, how many the disk tier supplied (the rest: resident blocks)
    num_forwards: int = 0  # forward passes that gave it tokens
    num_draft_tokens: int = 0  # speculative tokens drafted and verified
    num_accepted_tokens: int = 0  # of them, kept (each one a token without a forward pass of its own)

    @property
    def num_prefilled_tokens(self) -> int:
        return self.num_prompt_tokens - self.num_cached_tokens

    @property
    def acceptance_rate(self) -> float:
        """Kept / drafted speculative tokens; NaN when nothing was drafted."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else float("nan")

    @property
    def tokens_per_forward(self) -> float:
        """Output tokens per forward pass that produced any: 1 without speculation."""
        return self.num_output_tokens / self.num_forwards if self.num_forwards else float("nan")

    @property
    def num_memory_tokens(self) -> int:
        """Cached prompt tokens whose blocks were still resident in the paged cache."""
        return self.num_cached_tokens - self.num_disk_tokens

    @classmethod
    def from_timings(
        cls, t: RequestTimings, num_prompt_tokens: int, num_cached_tokens: int, num_preemptions: int = 0,
        load_seconds: float = 0.0, num_disk_tokens: int = 0,
    ) -> "RequestMetrics":
        return cls(num_prompt_tokens, num_cached_tokens, t.num_output_tokens, t.queue_time(), t.ttft(), t.tpot(),
                   num_preemptions, load_seconds, num_disk_tokens, num_forwards=t.num_forwards,
                   num_draft_tokens=t.num_draft_tokens, num_accepted_tokens=t.num_accepted_tokens)


@dataclass(frozen=True, slots=True)
class StepStats:
    """One engine step: what it computed and how long it took."""

    num_prefill_tokens: int
    num_decode_tokens: int  # tokens the decoding sequences emitted (with speculative decoding, kept drafts too)
    seconds: float
    bytes_read: int  # weights + KV read by the step (estimate), for achieved bandwidth
    num_decode_seqs: int = 0  # sequences that decoded (each emitted one token, or more with kept drafts)


@dataclass(frozen=True, slots=True)
class LiveRequest:
    """A request still in flight, as of the snapshot: prefill progress and the latencies so far."""

    request_id: int
    waiting: bool
    num_prompt_tokens: int
    num_cached_tokens: int  # reused from the prefix cache (0 until admitted)
    num_computed_prompt_tokens: int  # prefill progress: prompt tokens whose KV is in the cache
    num_output_tokens: int
    ttft: float  # NaN until the first token
    tpot: float  # so far; NaN with fewer than 2 tokens
    num_preemptions: int


@dataclass(frozen=True, slots=True)
class PrefixTiers:
    """Where one conversation's cached prefix is: of its full blocks, how many are resident in the paged
    cache, how many more only in the disk tier; the rest is gone (recomputed on its next turn)."""

    num_blocks: int
    num_resident: int
    num_disk_only: int

    @property
    def num_gone(self) -> int:
        return self.num_blocks - self.num_resident - self.num_disk_only


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A snapshot for the UI: blocks, queues, cache hits, recent latencies and throughput."""

    num_blocks_total: int | None
    num_blocks_used: int | None
    num_blocks_cached_free: int | None  # refcount 0, still holding reusable prefix KV (LRU-evictable)
    num_blocks_free: int | None
    block_size: int | None
    kv_bytes_per_token: int | None
    num_running: int
    num_waiting: int
    prefix_cache_hit_rate: float  # cached prompt tokens / prompt tokens looked up, since start
    recent_ttft: tuple[float, ...]
    recent_tpot: tuple[float, ...]
    decode_tokens_per_s: float  # over the recent window of decode steps
    decode_bandwidth_gb_s: float  # bytes read per decode step / step time, recent window
    num_preemptions: int = 0
    requests: tuple[LiveRequest, ...] = ()  # in flight: running first, then waiting
    spec_acceptance_rate: float = float("nan")  # kept / drafted speculative tokens, recent window; NaN: none drafted
    spec_tokens_per_step: float = float("nan")  # tokens per sequence per decode step, recent window (1 = no gain)
    disk: DiskTierStats | None = None  # the disk tier of the prefix cache; None when it is off
    prefix_disk_hit_rate: float = 0.0  # prompt tokens from the disk tier / prompt tokens looked up, since start
    num_threads: int | None = None  # the compute team's size now; None: not reported (a remote server)
    num_cpus: int | None = None  # the CPUs this process may use (affinity, cgroup quota)
    threads_adaptive: bool = False  # True: auto, fewer threads while other programs are busy
    prefill_tokens_per_s: float = 0.0  # prompt tokens computed per second, recent prefill steps (0.0: none yet)

    def request(self, request_id: int | None) -> LiveRequest | None:
        return next((r for r in self.requests if r.request_id == request_id), None)


class StatsWindow:
    """Recent history kept by the engine; snapshots are taken from it."""

    def __init__(self, size: int = 64) -> None:
        self.ttft: deque[float] = deque(maxlen=size)
        self.tpot: deque[float] = deque(maxlen=size)
        self.decode_steps: deque[StepStats] = deque(maxlen=size)
        self.prefill_steps: deque[StepStats] = deque(maxlen=size)  # steps that prefilled (decodes may ride along)
        self.num_prompt_tokens = 0
        self.num_cached_tokens = 0
        self.num_disk_tokens = 0
        self.num_preemptions = 0
        self.spec_steps: deque[tuple[int, int, int, int]] = deque(maxlen=size)  # drafted, kept, tokens, seqs

    def add_spec_step(self, num_drafted: int, num_accepted: int, num_tokens: int, num_seqs: int) -> None:
        """A decode step's speculation: tokens drafted and kept, and tokens emitted by how many sequences."""
        if num_seqs:
            self.spec_steps.append((num_drafted, num_accepted, num_tokens, num_seqs))

    def spec_rates(self) -> tuple[float, float]:
        """(acceptance rate, tokens per sequence per step) over the recent decode steps."""
        drafted, accepted, tokens, seqs = (sum(col) for col in zip(*self.spec_steps)) if self.spec_steps else (0,) * 4
        return (accepted / drafted if drafted else float("nan")), (tokens / seqs if seqs else float("nan"))

    def add_request(self, m: RequestMetrics) -> None:
        if m.ttft == m.ttft:  # not NaN
            self.ttft.append(m.ttft)
        if m.tpot == m.tpot:
            self.tpot.append(m.tpot)

    def add_lookup(self, num_prompt_tokens: int, num_cached_tokens: int, num_disk_tokens: int = 0) -> None:
        self.num_prompt_tokens += num_prompt_tokens
        self.num_cached_tokens += num_cached_tokens
        self.num_disk_tokens += num_disk_tokens

    def add_step(self, s: StepStats) -> None:
        if s.num_decode_tokens and not s.num_prefill_tokens:
            self.decode_steps.append(s)
        elif s.num_prefill_tokens:
            self.prefill_steps.append(s)

    def prefill_rate(self) -> float:
        """Prompt tokens computed per second over the recent prefill steps (0.0: none yet)."""
        seconds = sum(s.seconds for s in self.prefill_steps)
        return sum(s.num_prefill_tokens for s in self.prefill_steps) / seconds if seconds > 0 else 0.0

    def hit_rate(self) -> float:
        return self.num_cached_tokens / self.num_prompt_tokens if self.num_prompt_tokens else 0.0

    def disk_hit_rate(self) -> float:
        return self.num_disk_tokens / self.num_prompt_tokens if self.num_prompt_tokens else 0.0

    def decode_rates(self) -> tuple[float, float]:
        """(tokens/s, GB/s) over the recent pure-decode steps."""
        seconds = sum(s.seconds for s in self.decode_steps)
        if seconds <= 0:
            return 0.0, 0.0
        tokens = sum(s.num_decode_tokens for s in self.decode_steps)
        return tokens / seconds, sum(s.bytes_read for s in self.decode_steps) / seconds / 1e9


def median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


# The prefix cache's disk tier (core/kvdisk/): its counters and a snapshot of it.

@dataclass(slots=True)
class DiskCounters:
    num_hits: int = 0  # blocks read, verified and used
    num_corrupt: int = 0  # entries that failed verification (removed, recomputed)
    num_writes: int = 0
    num_evictions: int = 0
    num_dropped: int = 0  # writes skipped because the writer fell behind
    num_temp_cleaned: int = 0  # leftover temp files removed at start

    def minus(self, other: "DiskCounters") -> "DiskCounters":
        return DiskCounters(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def plus(self, other: "DiskCounters") -> "DiskCounters":
        return DiskCounters(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True, slots=True)
class DiskTierStats:
    """A snapshot for panels and `llmchat cache`."""

    root: str
    num_entries: int
    num_bytes: int
    budget_bytes: int
    session: DiskCounters  # this process
    lifetime: DiskCounters  # every process, as recorded in stats.json (plus this one's unsaved part)
