"""What a serving engine's Prometheus `/metrics` says about its KV cache and queues, by engine.

vLLM (`vllm:*`), SGLang (`sglang:*`) and llmchat serve (vLLM's names plus `llmchat:*` block counts) are
read; any other server, or none, gives a ServerFigures of Nones: the panels then say "not reported by
this server". Parsing is prometheus_client's.
"""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class ServerFigures:
    engine: str | None = None  # "vllm", "sglang", "llmchat" or None (not reported)
    num_running: int | None = None
    num_waiting: int | None = None
    num_blocks_total: int | None = None
    num_blocks_used: int | None = None
    num_blocks_cached_free: int | None = None
    num_blocks_free: int | None = None
    block_size: int | None = None
    kv_bytes_per_token: int | None = None
    prefix_cache_hit_rate: float | None = None  # cached / looked-up prompt tokens since the server started
    decode_tokens_per_s: float | None = None
    num_preemptions: int | None = None


def _samples(text: str) -> dict[str, list[tuple[dict, float]]]:
    out: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def parse_server_metrics(text: str) -> ServerFigures:
    """The figures in a /metrics text; ValueError if it is not Prometheus text."""
    samples = _samples(text)

    def total(name: str) -> float | None:  # summed over label sets (several models or engines)
        values = [v for _, v in samples.get(name, ())]
        return sum(values) if values else None

    def whole(name: str) -> int | None:
        value = total(name)
        return None if value is None else int(round(value))

    if any(name.startswith("vllm:") for name in samples):
        engine = "llmchat" if any(name.startswith("llmchat:") for name in samples) else "vllm"
        queries, hits = total("vllm:prefix_cache_queries_total"), total("vllm:prefix_cache_hits_total")
        info = samples.get("vllm:cache_config_info", [({}, 0.0)])[0][0]
        num_blocks = whole("llmchat:kv_blocks_total") or _int(info.get("num_gpu_blocks"))
        usage = total("vllm:kv_cache_usage_perc")
        used = whole("llmchat:kv_blocks_used")
        if used is None and usage is not None and num_blocks:
            used = int(round(usage * num_blocks))
        free = whole("llmchat:kv_blocks_free")
        if free is None and used is not None and num_blocks:
            free = num_blocks - used  # vLLM does not split free blocks into empty and cached
        return ServerFigures(
            engine, num_running=whole("vllm:num_requests_running"), num_waiting=whole("vllm:num_requests_waiting"),
            num_blocks_total=num_blocks, num_blocks_used=used, num_blocks_free=free,
            num_blocks_cached_free=whole("llmchat:kv_blocks_cached_free"), block_size=_int(info.get("block_size")),
            kv_bytes_per_token=whole("llmchat:kv_bytes_per_token"),
            prefix_cache_hit_rate=hits / queries if queries else None,
            decode_tokens_per_s=total("llmchat:decode_tokens_per_second"),
            num_preemptions=whole("vllm:num_preemptions_total"),
        )
    if any(name.startswith("sglang:") for name in samples):
        return ServerFigures("sglang", whole("sglang:num_running_reqs"), whole("sglang:num_queue_reqs"),
                             prefix_cache_hit_rate=total("sglang:cache_hit_rate"),
                             decode_tokens_per_s=total("sglang:gen_throughput"))
    return ServerFigures()


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
