"""The in-app exactness check: the prefix cache stores the prefix's K and V, not the answer, so a turn
re-run greedily from the cache must produce exactly the tokens of a run with the cache off.

Both runs are greedy (whatever the chat's temperature) and run one after the other (so neither's batch
shape can differ from the other's by the other), as ordinary requests: other chats keep streaming. The
first reuses the chat's cached blocks; the second is flagged use_prefix_cache=False (nothing looked up,
nothing cached). The result is "identical: N of N tokens" or the first divergent token in both runs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..api.params import SamplingParams

MAX_CHECK_TOKENS = 256


@dataclass(frozen=True, slots=True)
class CacheCheck:
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens the cached run reused
    num_tokens: int  # tokens compared (each run generated this many)
    num_identical: int  # leading tokens identical in both runs
    divergence: int | None = None  # first differing output position (None: identical)
    cached_token: str | None = None  # the token there, with the cache
    uncached_token: str | None = None  # and without it
    error: str | None = None  # a run that failed (then nothing was compared)

    @property
    def identical(self) -> bool:
        return self.error is None and self.divergence is None and self.num_identical == self.num_tokens


def compare_runs(cached_ids, uncached_ids, num_prompt: int, num_cached: int,
                 token_text: Callable[[int], str]) -> CacheCheck:
    n = min(len(cached_ids), len(uncached_ids))
    same = next((i for i in range(n) if cached_ids[i] != uncached_ids[i]), n)
    if same == n and len(cached_ids) == len(uncached_ids):
        return CacheCheck(num_prompt, num_cached, n, n)
    at = lambda ids: token_text(ids[same]) if same < len(ids) else None  # noqa: E731
    return CacheCheck(num_prompt, num_cached, max(len(cached_ids), len(uncached_ids)), same, same,
                      at(cached_ids), at(uncached_ids))


def check_cache(submit_ids: Callable, prompt_ids: list[int], num_tokens: int,
                token_text: Callable[[int], str], timeout: float | None = None) -> CacheCheck:
    """Blocking (run it off the UI thread): `submit_ids(prompt_ids, params, use_prefix_cache=...)` returns a
    handle whose wait() gives the Finished event (core/backends/service.py EngineService.submit_ids)."""
    params = SamplingParams(temperature=0, max_tokens=max(1, min(num_tokens, MAX_CHECK_TOKENS)), ignore_eos=True)
    runs = []
    for use_prefix_cache in (True, False):
        finished = submit_ids(list(prompt_ids), params, use_prefix_cache=use_prefix_cache).wait(timeout)
        if finished is None or finished.error:
            error = finished.error if finished is not None else "the engine did not answer in time"
            return CacheCheck(len(prompt_ids), 0, 0, 0, error=error)
        runs.append(finished)
    cached, uncached = runs
    return compare_runs(cached.output_ids, uncached.output_ids, len(prompt_ids), cached.metrics.num_cached_tokens,
                        token_text)
