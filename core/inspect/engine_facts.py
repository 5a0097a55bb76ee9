"""The seed's misconceptions, answered with this engine's live numbers (the misconceptions screen formats
them): decode reads bytes (achieved GB/s vs the machine's copy bandwidth), prefill computes (achieved
FLOP/s), the cache holds K and V only (bytes per token with and without GQA), speculative decoding (on or
off, recent acceptance), batching raises throughput (tokens/s and step time per batch size), per-token cost
grows with context (step time at the shortest and longest context seen), and the context the KV budget can
hold vs the model's advertised one.

Taken on the engine thread (EngineService.facts) from the engine's recent-steps window (core/api/metrics.py).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..config import ModelConfig
from ..api.metrics import EngineStats, StepStats


@dataclass(frozen=True, slots=True)
class BatchPoint:
    batch_size: int  # sequences decoded together in one step
    num_steps: int
    step_seconds: float  # median step time
    tokens_per_s: float  # the aggregate: tokens emitted / seconds, over these steps

    @property
    def tpot(self) -> float:
        """Seconds per token for each sequence: the step time, less where kept drafts add tokens to a step."""
        return self.batch_size / self.tokens_per_s


@dataclass(frozen=True, slots=True)
class ContextPoint:
    context_tokens: int  # K/V tokens the step read (one sequence)
    step_seconds: float


@dataclass(frozen=True, slots=True)
class EngineFacts:
    stats: EngineStats
    copy_gb_s: float | None  # measured once per machine (core/inspect/bandwidth.py); None: not measured yet
    weight_bytes: int  # read once per decode step, whatever the batch
    flops_per_token: int  # 2 x the multiply-adds of the linear layers (attention's own FLOPs excluded)
    prefill_tokens_per_s: float
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    kv_element_size: int
    kv_bytes_per_token: int  # layers x 2 (K, V) x KV heads x head dim x element size
    kv_bytes_per_token_without_gqa: int  # the same with as many KV heads as query heads
    batch: tuple[BatchPoint, ...]  # from the recent pure-decode steps, by batch size
    context: tuple[ContextPoint, ...]  # single-sequence steps: medians of the shortest and the longest third
    advertised_context: int
    kv_capacity_tokens: int  # what the KV budget holds, all chats together
    speculative_tokens: int = 0  # most tokens drafted per sequence and step; 0: speculative decoding is off

    @property
    def prefill_flop_s(self) -> float:
        return self.prefill_tokens_per_s * self.flops_per_token

    @property
    def decode_flop_s(self) -> float:
        return self.stats.decode_tokens_per_s * self.flops_per_token

    @property
    def bandwidth_fraction(self) -> float | None:
        """Decode's achieved GB/s as a fraction of the machine's copy bandwidth."""
        if not self.copy_gb_s:
            return None
        return self.stats.decode_bandwidth_gb_s / self.copy_gb_s

    @property
    def gqa_saving(self) -> float:
        return self.kv_bytes_per_token_without_gqa / self.kv_bytes_per_token


def flops_per_token(cfg: ModelConfig) -> int:
    h, hd = cfg.hidden_size, cfg.head_dim
    per_layer = h * hd * (2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads) + 3 * h * cfg.intermediate_size
    return 2 * (cfg.num_hidden_layers * per_layer + h * cfg.vocab_size)


def facts_of(engine, copy_gb_s: float | None) -> EngineFacts:
    cfg: ModelConfig = engine.loaded.config
    kv = engine.kv_cache
    element_size = kv.bytes_per_token // cfg.kv_bytes_per_token(1)
    window = engine.window
    by_size: dict[int, list[StepStats]] = {}  # by sequences decoded (kept drafts make more tokens than that)
    single: list[ContextPoint] = []
    for s in window.decode_steps:
        by_size.setdefault(s.num_decode_seqs, []).append(s)
        if s.num_decode_seqs == 1:
            single.append(ContextPoint((s.bytes_read - engine.weight_bytes) // kv.bytes_per_token, s.seconds))
    batch = tuple(BatchPoint(n, len(steps), statistics.median(s.seconds for s in steps),
                             sum(s.num_decode_tokens for s in steps) / sum(s.seconds for s in steps))
                  for n, steps in sorted(by_size.items()))
    context: tuple[ContextPoint, ...] = ()
    single.sort(key=lambda p: p.context_tokens)
    third = len(single) // 3
    if third and single[-1].context_tokens > single[0].context_tokens:  # the shortest and longest thirds' medians
        context = tuple(ContextPoint(int(statistics.median(p.context_tokens for p in part)),
                                     statistics.median(p.step_seconds for p in part))
                        for part in (single[:third], single[-third:]))
    return EngineFacts(
        engine.stats(), copy_gb_s, engine.weight_bytes, flops_per_token(cfg), window.prefill_rate(),
        cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, element_size,
        kv.bytes_per_token, cfg.kv_bytes_per_token(element_size) * cfg.num_attention_heads // cfg.num_key_value_heads,
        batch, context, engine.max_context, kv.num_blocks * kv.block_size, engine.speculator.max_k,
    )
