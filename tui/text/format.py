"""Numbers to short strings. Formatting only: every figure comes from core/api/metrics.py objects."""
from __future__ import annotations

import math
import time

from typing import TYPE_CHECKING

from ...core.api.metrics import RequestMetrics

if TYPE_CHECKING:  # (kv_disk_store imports torch; the UI must paint before torch loads)
    from ...core.api.metrics import DiskTierStats

DASH = "—"
MAX_SHOWN_CHARS = 20_000  # longer messages are shown cut (the whole text is kept, sent and exported)


def cut_for_display(text: str) -> tuple[str, str]:
    """(the part of a message that is shown, a note on the rest: "" when all of it is shown)."""
    if len(text) <= MAX_SHOWN_CHARS:
        return text, ""
    return text[:MAX_SHOWN_CHARS], f"\n… ({len(text) - MAX_SHOWN_CHARS:,} more characters not shown)"


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def seconds(x: float | None) -> str:
    """0.0123 -> '12 ms', 1.234 -> '1.23 s', 42.1 -> '42.1 s'; NaN/None -> '—'."""
    if _missing(x):
        return DASH
    if x < 1:
        return f"{x * 1000:.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"
    return f"{x:.2f} s" if x < 10 else f"{x:.1f} s"


def ms(x: float | None) -> str:
    """Per-token times, always in ms: 0.0193 -> '19.3 ms'."""
    return DASH if _missing(x) else f"{x * 1000:.1f} ms"


def count(n: int | None) -> str:
    return DASH if n is None else f"{n:,}"


def rate(x: float | None, unit: str) -> str:
    if _missing(x) or x == 0:
        return DASH
    return f"{x:.1f} {unit}" if x < 100 else f"{x:.0f} {unit}"


def threads(stats) -> str:
    """The engine's compute team from EngineStats: 'threads 2 of 2 CPUs · auto', '... · others busy' while
    other programs keep CPUs busy (auto gave up threads), '... · fixed' when --threads or the config set it."""
    if stats.num_threads is None:
        return "threads not reported"
    text = f"threads {stats.num_threads} of {count(stats.num_cpus)} CPUs · "
    if not stats.threads_adaptive:
        return text + "fixed"
    return text + ("others busy" if stats.num_threads < (stats.num_cpus or 0) else "auto")


def percent(x: float | None) -> str:
    return DASH if _missing(x) else f"{x * 100:.0f}%"


def nbytes(n: int | None) -> str:
    if n is None:
        return DASH
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def reused(m: RequestMetrics) -> str:
    """'reused 496 of 512 prompt tokens'."""
    return f"reused {m.num_cached_tokens:,} of {m.num_prompt_tokens:,} prompt tokens"


def reused_detail(m: RequestMetrics) -> str:
    """reused(m), or with disk hits 'reused 1,984 of 2,010 · 1,984 from disk · 26 prefilled'."""
    if not m.num_disk_tokens:
        return reused(m)
    return (f"reused {m.num_cached_tokens:,} of {m.num_prompt_tokens:,} · {m.num_disk_tokens:,} from disk · "
            f"{m.num_prefilled_tokens:,} prefilled")


def disk_tier(d: DiskTierStats) -> str:
    """'disk 1,234 blocks · 870.2 MiB of 4 GB' and 'disk hits 120 blocks this run'."""
    corrupt = f" · bad {d.session.num_corrupt}" if d.session.num_corrupt else ""
    return (f"disk {d.num_entries:,} blocks · {nbytes(d.num_bytes)} of {d.budget_bytes / 1e9:.3g} GB\n"
            f"disk hits {d.session.num_hits:,} blocks this run{corrupt}")


def turn_line(m: RequestMetrics) -> str:
    """The one-line summary under a reply."""
    parts = [f"TTFT {seconds(m.ttft)}"]
    if not _missing(m.tpot):
        parts.append(f"TPOT {ms(m.tpot)}")
    parts.append(f"{m.num_output_tokens:,} tokens")
    parts.append(reused_detail(m))
    if m.num_preemptions:
        parts.append(f"preempted {m.num_preemptions}×")
    if m.num_draft_tokens:
        parts.append(speculation(m))
    return " · ".join(parts)


def speculation(m: RequestMetrics) -> str:
    """'drafts kept 86/97 (89%), 3.5 tokens/forward'; empty when nothing was drafted."""
    if not m.num_draft_tokens:
        return ""
    return (f"drafts kept {m.num_accepted_tokens:,}/{m.num_draft_tokens:,} ({percent(m.acceptance_rate)}), "
            f"{m.tokens_per_forward:.1f} tokens/forward")


def when(timestamp: float) -> str:
    """A chat's last activity: '14:02' today, 'Mar 3' this year, '2024-03-03' before."""
    t, now = time.localtime(timestamp), time.localtime()
    if t[:3] == now[:3]:
        return time.strftime("%H:%M", t)
    if t.tm_year == now.tm_year:
        return time.strftime("%b %d", t)
    return time.strftime("%Y-%m-%d", t)


def merged_draft(refused: str, typed: str) -> str:
    """A refused message goes back into the input box, before what the user typed meanwhile: nothing is lost."""
    return f"{refused}\n\n{typed}" if typed.strip() else refused
