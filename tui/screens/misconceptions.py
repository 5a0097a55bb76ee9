"""The seed's misconceptions, each answered with this machine's live numbers (core/inspect/engine_facts.py, the
machine's copy bandwidth from core/inspect/bandwidth.py), and the keys of the cache operations. Formatting only;
refreshed every two seconds while open."""
from __future__ import annotations

import asyncio

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from ...core.inspect.engine_facts import EngineFacts
from ..actions.registry import cache_lines, key_label
from ..text import format as fmt
from ..text.key_bindings import keys_now

FACTS_INTERVAL_S = 2.0

def keys_text(keys_of: dict[str, str]) -> str:
    """The cache operations and their keys; `keys_of`: binding id -> the keys it has now."""
    lines = ["", "Cache operations (also in the command palette, Ctrl+P)"]
    lines += [f"  {key_label(keys_of.get(action, '')) or fmt.DASH:<7} {text}" for action, text in cache_lines()]
    lines.append("  (e, f, w act on the message that has focus: Tab or click it)")
    return "\n".join(lines)


def gb(x: float | None) -> str:
    return fmt.rate(x, "GB/s")


def flops(x: float) -> str:
    return fmt.DASH if not x else f"{x / 1e9:.1f} GFLOP/s" if x < 1e12 else f"{x / 1e12:.2f} TFLOP/s"


def facts_text(f: EngineFacts, check_line: str | None) -> str:
    s = f.stats
    share = f.bandwidth_fraction
    lines = [
        "1. Decode lacks bandwidth, not compute.",
        f"   Each decode step reads every weight ({fmt.nbytes(f.weight_bytes)}) plus each chat's K/V. Achieved: "
        f"{gb(s.decode_bandwidth_gb_s)} at {fmt.rate(s.decode_tokens_per_s, 'tok/s')}; this machine copies "
        f"memory at {gb(f.copy_gb_s)}" + (f" (decode uses {fmt.percent(share)} of it)." if share else "."),
        f"   Its arithmetic: {flops(f.decode_flop_s)} — prefill does {flops(f.prefill_flop_s)} on the same weights.",
        "2. Prefill is compute-bound.",
        f"   {fmt.rate(f.prefill_tokens_per_s, 'prompt tok/s')} × {f.flops_per_token / 1e6:.0f} MFLOP per token "
        f"= {flops(f.prefill_flop_s)}: many tokens share one read of the weights.",
        "3. The cache holds K and V only — never Q, scores or answers.",
        f"   Per token: {f.num_layers} layers × 2 (K, V) × {f.num_kv_heads} KV heads × {f.head_dim} dims × "
        f"{f.kv_element_size} bytes = {fmt.nbytes(f.kv_bytes_per_token)}.",
        f"   Without GQA ({f.num_heads} KV heads, one per query head) it would be "
        f"{fmt.nbytes(f.kv_bytes_per_token_without_gqa)}: GQA shrinks the cache {f.gqa_saving:.0f}×, not the "
        "FLOPs (every query head still scores every past token).",
        "4. FlashAttention-style kernels are exact: they move fewer bytes, they do not approximate.",
        "   So is reuse: Verify cache (F5) re-runs a turn with the cache off and compares every token.",
        f"   {check_line or 'No check run in this chat yet.'}",
        "5. Speculative decoding keeps the output distribution (greedy output identical).",
        f"   {speculative_line(f)}",
        "6. Bigger batches raise throughput until per-token latency and KV memory set the limit.",
    ]
    if f.batch:
        for p in f.batch:
            lines.append(f"   {p.batch_size} chat{'s' if p.batch_size > 1 else ' '} decoding: "
                         f"{fmt.rate(p.tokens_per_s, 'tok/s')} in all, TPOT {fmt.ms(p.tpot)} each "
                         f"({p.num_steps} recent steps)")
    else:
        lines.append("   (no decode steps yet: start a reply or two)")
    lines.append("7. Each token costs more as the context grows: every step reads the whole context's K/V.")
    if len(f.context) == 2:
        lo, hi = f.context
        lines.append(f"   A decode step takes {fmt.ms(lo.step_seconds)} at {lo.context_tokens:,} tokens of context, "
                     f"{fmt.ms(hi.step_seconds)} at {hi.context_tokens:,} (medians of recent single-chat steps)")
    else:
        lines.append("   (needs single-chat decode steps at two different context lengths)")
    lines += [
        "8. Effective context vs the advertised one.",
        f"   The model advertises {f.advertised_context:,} tokens; this KV budget holds {f.kv_capacity_tokens:,} "
        f"tokens in all: {f.kv_capacity_tokens // max(f.advertised_context, 1):,} full-length chat(s) at once, "
        "the rest is evicted (LRU) and recomputed when needed.",
    ]
    return "\n".join(lines)


def speculative_line(f: EngineFacts) -> str:
    s = f.stats
    if not f.speculative_tokens:
        return "Off in this session (--no-speculative): every token costs one forward."
    on = (f"On: up to {f.speculative_tokens} tokens drafted per step (prompt lookup or a draft model), checked "
          "by the model in one forward; only the tokens it would have picked are kept.")
    if s.spec_acceptance_rate != s.spec_acceptance_rate:  # NaN: nothing drafted lately
        return on + "\n   No drafts verified lately: a reply that repeats its prompt drafts the most."
    return (on + f"\n   Recently: {fmt.percent(s.spec_acceptance_rate)} of drafts kept, "
            f"{s.spec_tokens_per_step:.2f} tokens per chat per decode step "
            "(mark accepted drafts, below, underlines them).")


class MisconceptionsScreen(Screen):
    BINDINGS = [Binding("escape,q,f1", "app.pop_screen", "Close")]

    def __init__(self) -> None:
        super().__init__(id="misconceptions-screen")
        self.copy_gb_s: float | None = None
        self.facts: EngineFacts | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Content("What the cache and the engine really do — with this machine's numbers"),
                         classes="dialog-title")
            yield Static(Content("asking the engine…"), id="facts")
            yield Static(Content(keys_text(keys_now(dict(self.app._keymap)))), id="cache-keys")
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#facts", Static).update(Content("measuring this machine's memory bandwidth (once)…"))
        self.copy_gb_s = await asyncio.to_thread(self.app.copy_bandwidth)
        await self.refresh_facts()
        self.set_interval(FACTS_INTERVAL_S, self.refresh_facts)

    async def refresh_facts(self) -> None:
        if self.app.bridge.inspect is None:
            self.query_one("#facts", Static).update(Content("These numbers need the in-process engine."))
            return
        facts = await self.app.bridge.ask(lambda backend: backend.facts(self.copy_gb_s))
        if facts is None or not self.is_attached:
            return
        self.facts = facts
        from ..actions.verify_cache import check_text

        current = self.app.current
        check = self.app.cache_checks.get(current.chat_id) if current else None
        self.query_one("#facts", Static).update(Content(facts_text(facts, check_text(check) if check else None)))
