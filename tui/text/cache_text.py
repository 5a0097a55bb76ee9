"""The cache explainer's record (core/engine/cache_explainer.py) as text: one line under a reply, and in full for
the detail view. Formatting only: every figure is the engine's."""
from __future__ import annotations

from ...core.api.explanation import CacheExplanation
from . import format as fmt
from ...core.text.sanitize import safe_text


def token(text: str | None) -> str:
    return "—" if text is None else safe_text(repr(text))


def reason(e: CacheExplanation) -> str:
    """Why the token after the reused prefix was not a hit, in a few words."""
    r, cause = e.num_recomputed_tokens, e.cause
    if cause == "new-text" and e.num_cached_tokens > e.num_known_tokens:
        return f"new text after the prefix it shares with other chats ({e.num_cached_tokens:,} tokens they computed)"
    if cause == "new-text":
        return f"new text from token {e.num_known_tokens:,}" + (f"; the last partial block cost {r:,} tokens" if r else "")
    if cause == "partial-block":
        return f"nothing new: only the last partial block was recomputed ({r:,} tokens; blocks are cached only when full)"
    if cause == "reasoning":
        return (f"the template drops earlier turns' reasoning ({e.num_dropped_reasoning_tokens:,} tokens from "
                f"token {e.divergence:,}): {e.num_reprefilled_tokens + r:,} tokens prefilled again")
    if cause in ("template", "system-prompt"):
        what = "the chat template re-rendered earlier turns" if cause == "template" else "the system prompt changed"
        return f"{what}: token {e.divergence:,} was {token(e.earlier_token)}, now {token(e.prompt_token)}"
    if cause == "evicted":
        return (f"{e.num_evicted_blocks:,} of this chat's blocks were evicted (LRU) {fmt.seconds(e.evicted_seconds_ago)} "
                f"ago; {r:,} tokens recomputed")
    if cause == "not-cached":
        return (f"tokens {e.num_cached_tokens:,}–{e.num_known_tokens:,} were never cached by this engine (a restart?); "
                f"{r:,} tokens recomputed")
    if cause == "disk-corrupt":
        return f"the disk tier's entry for the next block failed verification (removed); {r:,} tokens recomputed"
    if cause == "disk-miss":
        where = (f"{e.num_evicted_blocks:,} blocks evicted from memory {fmt.seconds(e.evicted_seconds_ago)} ago"
                 if e.num_evicted_blocks else "not in memory")
        return f"{where} and not on disk (disk miss); {r:,} tokens recomputed"
    if cause == "model":
        return f"this chat's earlier KV came from another model (fingerprint); {r:,} tokens recomputed"
    if cause == "cache-off":
        return "the prefix cache was off for this request"
    return f"{cause}: {r:,} tokens recomputed"


def explanation_line(e: CacheExplanation) -> str:
    """'reuse ended at 96: new text from token 100; the last partial block cost 4 tokens'."""
    disk = f" ({e.num_disk_tokens:,} from disk)" if e.num_disk_tokens else ""
    line = f"reuse ended at {e.num_cached_tokens:,}{disk}: {reason(e)}"
    if e.num_preemptions:
        line += f" · preempted {e.num_preemptions}× (its KV freed and recomputed)"
    return line


def explanation_details(e: CacheExplanation) -> str:
    rows = [
        ("cause", e.cause),
        ("why", reason(e)),
        ("prompt tokens", f"{e.num_prompt_tokens:,}"),
        ("reused from the cache", f"{e.num_cached_tokens:,} ({e.num_cached_tokens // e.block_size:,} blocks "
                                  f"of {e.block_size})"),
        ("fed by this chat before", f"{e.num_known_tokens:,}"),
        ("known but recomputed", f"{e.num_recomputed_tokens:,}"),
        ("disk tier", f"{e.disk}" + (f": {e.num_disk_tokens:,} tokens from disk" if e.num_disk_tokens else "")),
        ("new to this chat", f"{e.num_new_tokens:,}"),
    ]
    if e.divergence is not None:
        rows.append(("first divergent token", f"position {e.divergence:,}: before {token(e.earlier_token)}, "
                                              f"now {token(e.prompt_token)}"))
    if e.cause == "evicted":
        rows.append(("evicted", f"{e.num_evicted_blocks:,} blocks, the first {fmt.seconds(e.evicted_seconds_ago)} ago"))
    if e.num_preemptions:
        rows.append(("preempted", f"{e.num_preemptions}× (its blocks freed, its tokens recomputed)"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
