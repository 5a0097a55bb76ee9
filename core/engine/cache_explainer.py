"""Why a turn's prompt reused the KV it did: where the reused prefix ended and why the next token missed.

The engine calls `explain_reuse` once per request, at its first admission (right after the prefix
lookup), with what it remembers: the conversation's previous request (`PriorTurn`: its ids, system
prompt and model fingerprint), what the client kept (`PromptContext.kept_ids`: the ids the chat already
fed, which it expects to be cached) and the block pool's eviction log. The answer is a frozen
`CacheExplanation`; the UI only formats it (tui/text/cache_text.py).

Causes, checked in this order (the first that explains the miss wins):
- cache-off:     prefix caching is off (engine-wide, or for this request: the exactness check);
- model:         the chat's earlier KV was made by another model or dtype (another fingerprint);
- system-prompt: the system prompt changed since the chat's last turn, so its first block differs;
- reasoning:     the chat template left out an earlier reply's reasoning (`<think>…</think>`; Qwen3's and
                 DeepSeek-R1's templates drop it from every assistant turn before the last user message): the
                 kept ids have the block where the prompt has the answer, so the answer is prefilled again
                 (how many tokens were dropped, how many prefilled again);
- template:      the chat template re-rendered earlier turns differently, so the prompt is not the kept
                 ids + new ids (first divergent position, and the token there in both);
- evicted:       blocks this chat had computed were evicted (LRU) to make room (how many, how long ago);
- disk-corrupt:  the disk tier had the next block but its entry failed verification (removed, recomputed);
- disk-miss:     known blocks are neither resident nor in the disk tier (evicted from memory, or from an
                 earlier run, and not or no longer on disk);
- not-cached:    the tokens were fed before but never cached by this engine (a restart, say; no disk tier);
- partial-block: reuse reached every full block it could and the prompt has no new text (a regenerate):
                 the rest sits in the last, partial block (blocks are cached only when full) and is computed
                 again (`num_recomputed_tokens` is its cost);
- new-text:      reuse reached every full block it could, then comes text the chat never fed (the normal
                 case; the last partial block before it still costs `num_recomputed_tokens`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from ..api.explanation import CAUSES, DISK, CacheExplanation, PriorTurn, PromptContext
from ..text.reasoning import CLOSE, OPEN

def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reasoning_block_at(ids: Sequence[int], start: int, token_text: Callable[[int], str]) -> int:
    """How many of `ids` from `start` are a reasoning block (`<think>…</think>` and the whitespace after it); 0:
    none begins there (or it never closes: a template keeps an unclosed block as it is)."""
    text = ""
    for i in range(start, len(ids)):
        text += token_text(ids[i])
        head = text.lstrip()
        if not (head.startswith(OPEN) or OPEN.startswith(head)):
            return 0
        if CLOSE in text:
            end = i + 1
            while end < len(ids) and not token_text(ids[end]).strip():
                end += 1
            return end - start
    return 0


def explain_reuse(
    prompt_ids: Sequence[int],
    num_cached_tokens: int,
    block_size: int,
    *,
    context: PromptContext | None = None,
    prior: PriorTurn | None = None,
    fingerprint: bytes = b"",
    caching: bool = True,
    block_hashes: Sequence[bytes] = (),
    evicted_at: Callable[[bytes], float | None] = lambda h: None,
    now: float = 0.0,
    token_text: Callable[[int], str] = str,
    disk_on: bool = False,
    num_disk_tokens: int = 0,
    num_disk_failed_blocks: int = 0,
    on_disk: Callable[[bytes], bool] = lambda h: False,
) -> CacheExplanation:
    """`block_hashes`: the prompt's chain hashes (full blocks); `evicted_at`: the eviction log's lookup;
    disk_on: the disk tier is on (`num_disk_tokens` came from it, `num_disk_failed_blocks` entries failed to
    load, `on_disk` says whether it has a block)."""
    context = context or PromptContext()
    num_prompt = len(prompt_ids)
    kept = context.kept_ids
    earlier = max((kept, prior.token_ids if prior else ()), key=lambda ids: common_prefix(prompt_ids, ids))
    num_known = common_prefix(prompt_ids, earlier)
    disk = ("corrupt" if num_disk_failed_blocks else "hit" if num_disk_tokens else "unused") if disk_on else "off"
    base = dict(num_prompt_tokens=num_prompt, num_cached_tokens=num_cached_tokens, block_size=block_size,
                num_disk_tokens=num_disk_tokens)

    def made(cause: str, known: int = num_known, **extra) -> CacheExplanation:
        recomputed = max(0, min(known, num_prompt) - num_cached_tokens)
        extra.setdefault("disk", disk)
        return CacheExplanation(cause, num_known_tokens=known, num_recomputed_tokens=recomputed, **base, **extra)

    if not caching:
        return made("cache-off")
    if prior is not None and prior.fingerprint != fingerprint and num_cached_tokens < num_known:
        return made("model")
    diverged = num_known < len(kept) or (not kept and prior is not None and num_known < len(prior.token_ids)
                                          and num_known < num_prompt)
    if diverged and num_cached_tokens <= num_known:
        divergence = dict(divergence=num_known,
                          earlier_token=token_text(earlier[num_known]) if num_known < len(earlier) else None,
                          prompt_token=token_text(prompt_ids[num_known]) if num_known < num_prompt else None)
        if (prior is not None and context.has_system_prompt and prior.has_system_prompt
                and prior.system_prompt != context.system_prompt):
            return made("system-prompt", **divergence)
        if num_known < len(kept):  # the kept ids were not the prompt's prefix: the template rewrote them
            dropped = reasoning_block_at(kept, num_known, token_text)
            if dropped:
                return made("reasoning", num_dropped_reasoning_tokens=dropped,
                            num_reprefilled_tokens=len(kept) - num_known - dropped, **divergence)
            return made("template", **divergence)
    # Full blocks that could have been reused: the last id of the earlier request was sampled, never fed (no
    # KV), and the prompt's last token is always computed.
    num_computed_before = min(num_known, len(earlier) - 1)
    reusable = max(0, min(num_computed_before, num_prompt - 1)) // block_size * block_size
    if num_cached_tokens >= reusable:  # every full block it could: what follows is new text, or only the
        return made("new-text" if num_known < num_prompt else "partial-block")  # last partial block (regenerate)
    if num_disk_failed_blocks:
        return made("disk-corrupt")
    missing = block_hashes[num_cached_tokens // block_size : reusable // block_size]
    times = [t for h in missing if (t := evicted_at(h)) is not None]
    evicted = {}
    if times:
        first = evicted_at(missing[0]) if missing else None
        evicted = dict(num_evicted_blocks=len(times), evicted_seconds_ago=now - (first if first is not None else max(times)))
    if disk_on and missing and not on_disk(missing[0]):
        return made("disk-miss", disk="miss", **evicted)
    return made("evicted", **evicted) if times else made("not-cached")
