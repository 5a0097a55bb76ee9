"""LLMEngine: add_request / abort / step() -> events. Synchronous; core/backends/service.py runs it on a thread."""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .cache_explainer import PromptContext
from .chains import ConversationChains
from ..config import EngineConfig
from ..cpu_load import ThreadGovernor
from ..cpu_threads import plan_threads
from ..api.events import EngineEvent, Finished, Started, TextDelta
from .kv_cache import PagedKVCache, default_kv_cache_bytes
from .stats_snapshot import engine_stats
from ..kvdisk.tier import KVDiskTier, kv_disk_root
from ..model.loader import LoadedModel
from ..api.metrics import EngineStats, PrefixTiers, RequestMetrics, StatsWindow, StepStats, now
from .reuse_memory import ReuseMemory
from .runner import ModelRunner
from ..api.params import SamplingParams
from ..model.sampling import make_generator
from .scheduler import ScheduledBatch, Scheduler
from .sequence import FinishReason, Sequence
from .spec.speculative import SpecStep, build_speculator
from ..text.stop import StopStringMatcher
from ..text.tokenizer import IncrementalDetokenizer

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Stream:
    """Per-request text state: detokenizer, stop strings, text shown so far."""

    detok: IncrementalDetokenizer
    stop: StopStringMatcher
    text: list[str] = field(default_factory=list)


def model_fingerprint(loaded: LoadedModel, dtype: str) -> bytes:
    """Part of every block hash: KV from another model or dtype must never be reused."""
    cfg = json.dumps(loaded.config.to_hf_dict(), sort_keys=True)
    source = loaded.source_id or loaded.folder.name  # a GGUF's sha256, or the (converted) folder's name
    return hashlib.blake2b(f"{source}|{cfg}|{dtype}".encode(), digest_size=16).digest()


class LLMEngine:
    def __init__(self, loaded: LoadedModel, config: EngineConfig = EngineConfig(), draft: LoadedModel | None = None):
        self.loaded = loaded
        self.config = config
        self.tokenizer = loaded.tokenizer
        model = loaded.model
        if config.dtype is not None and config.dtype != loaded.dtype:
            raise ValueError(f"the engine is configured for {config.dtype} but the model was loaded in "
                             f"{loaded.dtype}; load it with the config's dtype (core/loader.load_model_for)")
        kv_bytes = config.kv_cache_bytes or default_kv_cache_bytes(str(model.device))
        self.kv_cache = PagedKVCache(loaded.config, config.block_size, kv_bytes, model.dtype, model.device)
        dtype_name = f"{loaded.dtype}|{loaded.weight_dtype}"
        self.block_manager = BlockManager(
            self.kv_cache.num_blocks, config.block_size, config.enable_prefix_caching,
            model_fingerprint(loaded, dtype_name), int(self.kv_cache.num_blocks * config.pin_fraction),
        )
        self.kv_disk: KVDiskTier | None = None
        if config.kv_disk_bytes > 0 and config.enable_prefix_caching:
            root = kv_disk_root(config.kv_disk_dir)
            try:  # a read-only or full cache folder costs the tier, never the engine
                self.kv_disk = KVDiskTier.open(root, config.kv_disk_bytes, self.kv_cache, self.block_manager,
                                               str(loaded.folder))
            except OSError as e:
                log.warning("the disk tier at %s cannot be opened (%s): replies are computed without it", root, e)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, config.max_num_batched_tokens,
                                   self.kv_disk)
        self.runner = ModelRunner(model, self.kv_cache, config.kernel_backend)
        self.max_context = loaded.config.max_position_embeddings
        self.speculator = build_speculator(config, loaded, self.block_manager, self.max_context, draft)
        self.weight_bytes = model.weight_bytes()
        self.window = StatsWindow()
        self.threads = ThreadGovernor(plan_threads(config.num_threads))  # the stepping thread's compute team
        self._ids = itertools.count(1)
        self._seqs: dict[int, Sequence] = {}
        self._streams: dict[int, _Stream] = {}
        self._pending: list[EngineEvent] = []
        self._tags: dict[int, Hashable] = {}  # request id -> the conversation it answers (if the client said)
        self.chains = ConversationChains(self.block_manager, lambda: self.kv_disk)  # tag -> its last request's hashes
        self.reuse = ReuseMemory(self.block_manager, lambda token_id: self.tokenizer.decode([token_id]),
                                 lambda: self.kv_disk)

    # -- requests ---------------------------------------------------------------------------
    def add_request(self, prompt_ids: list[int], params: SamplingParams, tag: Hashable | None = None,
                    context: PromptContext | None = None, use_prefix_cache: bool = True) -> int:
        """Queue a request; a refused one (empty, too long) gets its Finished(ERROR) event at the next step.
        `tag` names the conversation it answers, for residency(); `context` says what the client kept, for the
        cache explainer; use_prefix_cache=False computes it from scratch and caches nothing."""
        request_id = next(self._ids)
        seq = Sequence(request_id, list(prompt_ids), len(prompt_ids), params, generator=make_generator(params),
                       use_prefix_cache=use_prefix_cache)
        error = self._refusal(seq)
        if error:
            seq.finish_reason = FinishReason.ERROR
            self._pending.append(self._finished(seq, error))
            return request_id
        self._seqs[request_id] = seq
        self.reuse.expect(request_id, tag, context)
        if tag is not None:
            self._tags[request_id] = tag
        self._streams[request_id] = _Stream(IncrementalDetokenizer(self.tokenizer), StopStringMatcher(params.stop))
        self.scheduler.add(seq)
        return request_id

    def _refusal(self, seq: Sequence) -> str | None:
        if not seq.token_ids:
            return "the prompt is empty"
        if seq.num_tokens >= self.max_context:
            return (
                f"the prompt has {seq.num_tokens} tokens but the model's context is {self.max_context}; "
                "shorten the conversation or start a new chat"
            )
        capacity = self.block_manager.num_blocks * self.block_manager.block_size
        if seq.num_tokens + 1 > capacity:
            return f"the prompt needs {seq.num_tokens + 1} tokens of KV cache but it holds {capacity}; raise --kv-cache-gb"
        return None

    def abort(self, request_id: int, reason: FinishReason = FinishReason.ABORT, error: str | None = None) -> bool:
        """Stop a request; False if it is unknown or already finished. Its Finished event comes at the next step."""
        seq = self._seqs.get(request_id)
        if seq is None or seq.is_finished:
            return False
        self.scheduler.finish(seq, reason)
        self._pending.extend(self._finish_stream(seq, error))
        return True

    def fail_all(self, error: str) -> None:
        """After an internal error: finish every request in flight with reason ERROR (their blocks are freed)."""
        for request_id in list(self._seqs):
            self.abort(request_id, FinishReason.ERROR, error)

    def recover(self, error: str) -> None:
        """After a step raised: forget its half-done bookkeeping and fail every request in flight."""
        self.scheduler.lookups.clear()
        self.scheduler.warming.cancel_all()
        self.fail_all(error)

    @property
    def has_work(self) -> bool:
        return bool(self._pending) or self.scheduler.has_work

    def run_until_done(self) -> Iterator[EngineEvent]:
        """Step until every request is done (one-shot commands, benchmarks, tests), yielding each event."""
        while self.has_work:
            yield from self.step()

    # -- the step ---------------------------------------------------------------------------
    def step(self) -> list[EngineEvent]:
        """One scheduling step and forward pass. If it raises, the events it had taken (finishes of
        cancelled, refused or dropped requests) go back to the pending list: none is ever lost."""
        events: list[EngineEvent] = []
        try:
            return self._step(events)
        except BaseException:
            self._pending = events + self._pending
            raise

    def _step(self, events: list[EngineEvent]) -> list[EngineEvent]:
        events += self._pending
        self._pending = []
        self.threads.before_step()
        self.speculator.propose(self.scheduler.running)
        batch, dropped = self.scheduler.schedule()
        for seq in dropped:
            events.extend(self._finish_stream(seq, "the KV cache is too small to continue this reply; raise --kv-cache-gb"))
        for num_prompt, num_cached, num_disk in self.scheduler.lookups:
            self.window.add_lookup(num_prompt, num_cached, num_disk)
        self.scheduler.lookups.clear()
        if not batch.seqs:
            if self.kv_disk is not None and self.kv_disk.prefetch.has_pending:
                self.kv_disk.prefetch.wait()  # only disk reads in flight: sleep until one arrives, not spin
            return events
        start = now()
        for seq in batch.seqs:
            if seq.timings.scheduled is None and not seq.is_warm:
                seq.timings.scheduled = start
                self.reuse.admitted(seq)
                events.append(Started(seq.request_id, tuple(seq.token_ids[: seq.num_prompt_tokens]),
                                      max(seq.num_cached_tokens, 0), seq.num_disk_tokens))
        tokens, failed = self.runner.run(batch)
        if failed:  # a row that could not be sampled ends its own request; the rest of the batch goes on
            batch, tokens = self._drop_failed(batch, tokens, failed, events)
        newly_hashed: list[int] = []  # blocks hashed this step, while the kept drafts sit in token_ids
        spec = self.speculator.settle(batch, tokens, lambda b: newly_hashed.extend(self.scheduler.postprocess(b)))
        if self.kv_disk is not None and newly_hashed:
            self.kv_disk.save(newly_hashed)
        end = now()
        self.window.add_step(self._step_stats(batch, end - start, spec))
        for seq, new_ids in zip(batch.seqs, tokens):
            for j, token in enumerate(new_ids):  # kept drafted tokens, then the one sampled; a finish drops the rest
                if not seq.is_finished:
                    events.extend(self._append_token(seq, token, end, drafted=j < len(new_ids) - 1))
        return events

    def _drop_failed(self, batch: ScheduledBatch, tokens: list[list[int]], failed: dict[int, str],
                     events: list[EngineEvent]) -> tuple[ScheduledBatch, list[list[int]]]:
        """Finish the sequences whose sampling failed (their blocks freed before this step's are hashed, so
        no KV from a bad forward is cached) and return the batch without them."""
        keep = [i for i in range(len(batch.seqs)) if i not in failed]
        for i, error in failed.items():
            seq = batch.seqs[i]
            seq.draft_ids, seq.draft_probs = [], None
            self.scheduler.finish(seq, FinishReason.ERROR)
            events.extend(self._finish_stream(seq, error))
        kept = ScheduledBatch([batch.seqs[i] for i in keep], [batch.num_new_tokens[i] for i in keep])
        return kept, [tokens[i] for i in keep]

    def _append_token(self, seq: Sequence, token: int, t: float, drafted: bool = False) -> list[EngineEvent]:
        seq.token_ids.append(token)
        seq.timings.on_token(t)
        stream = self._streams[seq.request_id]
        text, stopped = stream.stop.feed(stream.detok.push(token))
        stream.text.append(text)
        events: list[EngineEvent] = [TextDelta(seq.request_id, text, (token,), drafted)]
        reason = None
        if stopped or (token in self.tokenizer.stop_token_ids and not seq.params.ignore_eos):
            reason = FinishReason.STOP
        elif seq.num_output_tokens >= seq.params.max_tokens or seq.num_tokens >= self.max_context:
            reason = FinishReason.LENGTH
        if reason is not None:
            self.scheduler.finish(seq, reason)
            events.extend(self._finish_stream(seq))
        return events

    def _finish_stream(self, seq: Sequence, error: str | None = None) -> list[EngineEvent]:
        """The last text delta (held-back text, if any) and the Finished event."""
        stream = self._streams.pop(seq.request_id)
        self._seqs.pop(seq.request_id, None)
        tag = self._tags.pop(seq.request_id, None)
        self.reuse.remember(seq)
        if tag is not None:
            self.chains.remember(tag, seq.block_hashes)
        events: list[EngineEvent] = []
        if not stream.stop.stopped:
            tail, stopped = stream.stop.feed(stream.detok.flush())
            tail += "" if stopped else stream.stop.flush()
            if tail:
                stream.text.append(tail)
                events.append(TextDelta(seq.request_id, tail, ()))
        finished = self._finished(seq, error, "".join(stream.text))
        self.window.add_request(finished.metrics)
        self.window.num_preemptions += seq.num_preemptions
        return events + [finished]

    def _finished(self, seq: Sequence, error: str | None, text: str = "") -> Finished:
        metrics = RequestMetrics.from_timings(
            seq.timings, seq.num_prompt_tokens, max(seq.num_cached_tokens, 0), seq.num_preemptions,
            num_disk_tokens=seq.num_disk_tokens,
        )
        return Finished(seq.request_id, seq.finish_reason, metrics, tuple(seq.output_ids), text, error,
                        self.reuse.pop(seq))

    def _step_stats(self, batch: ScheduledBatch, seconds: float, spec: SpecStep) -> StepStats:
        decoding = [n for n, drafting in zip(batch.num_new_tokens, spec.drafting) if n == 1 or drafting]
        num_decode = sum(decoding)  # a sequence verifying drafts decoded its kept tokens plus one
        if len(decoding) == len(batch.seqs):
            self.window.add_spec_step(spec.num_drafted, spec.num_accepted, num_decode, len(decoding))
        kv_read = sum(s.num_computed_tokens for s in batch.seqs) * self.kv_cache.bytes_per_token
        return StepStats(batch.num_tokens - num_decode, num_decode, seconds, self.weight_bytes + kv_read,
                         len(decoding))

    # -- stats ------------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        return engine_stats(self)

    # -- where each conversation's prefix lives (core/engine/chains.py) ------------------------------
    def residency(self) -> dict[Hashable, tuple[int, ...]]:
        in_flight = [(tag, seq.block_table) for rid, tag in self._tags.items() if (seq := self._seqs.get(rid))]
        return self.chains.residency(in_flight)

    def prefix_tiers(self) -> dict[Hashable, PrefixTiers]:
        return self.chains.prefix_tiers()

    def warm(self, tag: Hashable, prompt_ids: list[int]) -> int:
        """Prefill `prompt_ids` in idle steps for conversation `tag` (core/engine/warming.py); tokens it will have."""
        return self.scheduler.warming.start(tag, prompt_ids)

    def adopt_chain(self, tag: Hashable, token_ids: list[int]) -> None:
        self.chains.adopt(tag, token_ids)

    def close(self) -> None:
        """Finish the disk tier's writes (a one-shot command calls this before it exits)."""
        if self.kv_disk is not None:
            self.kv_disk.close()
            self.kv_disk = None
            self.scheduler.lower_tier = None
