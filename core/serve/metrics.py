"""`/metrics` of `llmchat serve`: Prometheus text with vLLM's metric names where vLLM has one.

Counters and histograms are fed from the engine's events (Started: prompt tokens looked up in the prefix
cache and how many hit; Finished: RequestMetrics); gauges are read from the engine's latest EngineStats
snapshot at scrape time. Names ours alone start with `llmchat:`. The text format and the histogram
arithmetic are prometheus_client's; this file only says what is counted.
"""
from __future__ import annotations

from collections.abc import Callable

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from ..api.events import Finished, Started
from ..api.metrics import EngineStats

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
# vLLM's buckets, so that dashboards built for it read ours the same way
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0)
QUEUE_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                 960.0, 1920.0, 7680.0)

prometheus_client.disable_created_metrics()  # as vLLM does: no `*_created` series next to each counter


class ServeMetrics:
    def __init__(self, model_name: str, stats: Callable[[], EngineStats], prefix_caching: bool = True) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        labels = ["model_name"]

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels + list(extra), registry=self.registry)

        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens of requests that started.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache (reused).")
        self.preemptions = counter("vllm:num_preemptions", "Requests preempted (their KV recomputed later).")
        self.finished = counter("vllm:request_success", "Requests finished, by reason.", ("finished_reason",))
        self.disk_hits = counter("llmchat:prefix_cache_disk_hits", "Prompt tokens of the prefix-cache hits that the "
                                 "disk tier supplied (a subset of vllm:prefix_cache_hits).")
        self.refused = counter("llmchat:requests_refused", "Requests refused (over the context, bad template...).")
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token (queue included).", labels,
                              buckets=TTFT_BUCKETS, registry=self.registry)
        self.tpot = Histogram("vllm:time_per_output_token_seconds", "Mean time per output token after the first.",
                              labels, buckets=TPOT_BUCKETS, registry=self.registry)
        self.queue_time = Histogram("vllm:request_queue_time_seconds", "Time from arrival to the first step.",
                                    labels, buckets=QUEUE_BUCKETS, registry=self.registry)
        self.registry.register(_EngineGauges(model_name, stats, prefix_caching))

    def on_event(self, event: object) -> None:
        """Count one engine event of a request this server submitted (called on the engine thread)."""
        name = self.model_name
        if isinstance(event, Started):
            self.prompt_tokens.labels(name).inc(len(event.prompt_ids))
            self.prefix_queries.labels(name).inc(len(event.prompt_ids))
            self.prefix_hits.labels(name).inc(event.num_cached_tokens)
            self.disk_hits.labels(name).inc(event.num_disk_tokens)
        elif isinstance(event, Finished):
            m = event.metrics
            if event.reason.value == "error" and not event.output_ids:
                self.refused.labels(name).inc()
                return
            self.generation_tokens.labels(name).inc(m.num_output_tokens)
            self.preemptions.labels(name).inc(m.num_preemptions)
            self.finished.labels(name, event.reason.value).inc()
            for histogram, value in ((self.ttft, m.ttft), (self.tpot, m.tpot), (self.queue_time, m.queue_time)):
                if value == value:  # not NaN
                    histogram.labels(name).observe(value)

    def text(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)


class _EngineGauges:
    """Gauges read from the engine's latest snapshot each time /metrics is scraped."""

    def __init__(self, model_name: str, stats: Callable[[], EngineStats], prefix_caching: bool) -> None:
        self.model_name = model_name
        self.stats = stats
        self.prefix_caching = prefix_caching

    def collect(self):
        s = self.stats()
        name = self.model_name

        def gauge(metric: str, doc: str, value: float | None) -> GaugeMetricFamily | None:
            if value is None:
                return None
            family = GaugeMetricFamily(metric, doc, labels=["model_name"])
            family.add_metric([name], value)
            return family

        total = s.num_blocks_total
        usage = s.num_blocks_used / total if total and s.num_blocks_used is not None else None
        families = [
            gauge("vllm:num_requests_running", "Requests in the running batch.", s.num_running),
            gauge("vllm:num_requests_waiting", "Requests waiting for a batch slot or KV blocks.", s.num_waiting),
            gauge("vllm:kv_cache_usage_perc", "Fraction of KV blocks held by requests in flight (1 = full).", usage),
            gauge("llmchat:kv_blocks_total", "KV blocks in the paged cache.", total),
            gauge("llmchat:kv_blocks_used", "KV blocks held by requests in flight.", s.num_blocks_used),
            gauge("llmchat:kv_blocks_cached_free", "Free KV blocks still holding a reusable prefix (LRU-evictable).",
                  s.num_blocks_cached_free),
            gauge("llmchat:kv_blocks_free", "KV blocks holding nothing.", s.num_blocks_free),
            gauge("llmchat:kv_bytes_per_token", "Bytes of K and V per token, all layers.", s.kv_bytes_per_token),
            gauge("llmchat:decode_tokens_per_second", "Decode tokens/s, recent steps.", s.decode_tokens_per_s),
        ]
        if s.disk is not None:  # the prefix cache's disk tier
            families += [gauge("llmchat:kv_disk_bytes", "Bytes of KV blocks in the disk tier.", s.disk.num_bytes),
                         gauge("llmchat:kv_disk_budget_bytes", "The disk tier's byte budget.", s.disk.budget_bytes),
                         gauge("llmchat:kv_disk_entries", "KV blocks in the disk tier.", s.disk.num_entries)]
        if total is not None and s.block_size is not None:  # vLLM's way of saying the cache geometry
            info = GaugeMetricFamily("vllm:cache_config_info", "KV cache configuration.",
                                     labels=["block_size", "num_gpu_blocks", "enable_prefix_caching"])
            info.add_metric([str(s.block_size), str(total), str(self.prefix_caching)], 1.0)
            families.append(info)
        yield from (f for f in families if f is not None)
