"""EngineStats: one snapshot of an engine's blocks, queue, recent timings, disk tier and threads."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..api.metrics import EngineStats, LiveRequest
from .sequence import Sequence, SequenceStatus

if TYPE_CHECKING:
    from .engine import LLMEngine


def engine_stats(engine: "LLMEngine") -> EngineStats:
    """The engine's snapshot for panels and stats commands (LLMEngine.stats)."""
    bm = engine.block_manager
    tokens_per_s, gb_per_s = engine.window.decode_rates()
    return EngineStats(
        num_blocks_total=bm.num_blocks,
        num_blocks_used=bm.num_used_blocks,
        num_blocks_cached_free=bm.num_cached_free_blocks,
        num_blocks_free=bm.num_empty_blocks,
        block_size=bm.block_size,
        kv_bytes_per_token=engine.kv_cache.bytes_per_token,
        num_running=len(engine.scheduler.running),
        num_waiting=len(engine.scheduler.waiting),
        prefix_cache_hit_rate=engine.window.hit_rate(),
        recent_ttft=tuple(engine.window.ttft),
        recent_tpot=tuple(engine.window.tpot),
        decode_tokens_per_s=tokens_per_s,
        decode_bandwidth_gb_s=gb_per_s,
        num_preemptions=engine.window.num_preemptions,
        spec_acceptance_rate=engine.window.spec_rates()[0],
        spec_tokens_per_step=engine.window.spec_rates()[1],
        requests=tuple(_live(seq) for seq in (*engine.scheduler.running, *engine.scheduler.waiting)),
        disk=engine.kv_disk.stats() if engine.kv_disk is not None else None,
        prefix_disk_hit_rate=engine.window.disk_hit_rate(),
        num_threads=engine.threads.num_threads,
        num_cpus=engine.threads.plan.num_cpus,
        threads_adaptive=engine.threads.plan.adaptive,
        prefill_tokens_per_s=engine.window.prefill_rate(),
    )

def _live(seq: Sequence) -> LiveRequest:
    t = seq.timings
    return LiveRequest(
        seq.request_id, seq.status is SequenceStatus.WAITING, seq.num_prompt_tokens, max(seq.num_cached_tokens, 0),
        min(seq.num_computed_tokens, seq.num_prompt_tokens), seq.num_output_tokens, t.ttft(), t.tpot(),
        seq.num_preemptions,
    )
