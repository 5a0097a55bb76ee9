"""The inspector: live panels for latency, the turn's prompt reuse, decode throughput and KV blocks.

Every figure comes from core/api/metrics.py (RequestMetrics of a turn, EngineStats snapshots); these
widgets only format them. Each panel explains itself in one line: as a tooltip on hover, and as a
visible line while it has focus (Tab to it).
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Sparkline, Static

from ...core.api.metrics import EngineStats, LiveRequest, PrefixTiers, RequestMetrics
from ..text import format as fmt
from ...core.text.sanitize import safe_text
from ..session import ChatSession
from .bar import SplitBar

EXPLAIN = {
    "latency": "TTFT = wait + prefill of the uncached prompt (compute-bound). TPOT = one decode step: "
               "it reads every weight and the chat's K/V from memory, so bandwidth, not compute, sets it.",
    "prompt": "Prompt tokens whose K and V are already in the cache are reused, not recomputed: "
              "only the new suffix is prefilled. That keeps TTFT flat as a chat grows.",
    "decode": "Decode reads all the weights once per step whatever the batch, so tokens/s grows with "
              "concurrent chats until KV memory or per-token latency sets the limit. Speculative decoding "
              "verifies several drafted tokens in one such step; the output is unchanged (greedy: identical).",
    "kv": "The cache holds only K and V of past tokens (never Q, scores or answers), in blocks. "
          "Chats sharing a prefix (a system prompt) share its blocks; cached blocks are kept until evicted.",
}


NOTES = {  # always visible; F1 answers them with this machine's numbers (tui/screens/misconceptions.py)
    "decode": "bandwidth, not FLOPs, sets TPOT (F1)",
    "kv": "K and V only; GQA shrinks it (F1)",
}

NOT_REPORTED = "not reported by this server"


class Panel(Vertical, can_focus=True):
    def __init__(self, key: str, title: str) -> None:
        super().__init__(id=f"panel-{key}", classes="panel")
        self.border_title = title
        self.tooltip = EXPLAIN[key]
        self.key = key

    def compose_explain(self) -> Static:
        return Static(Content(EXPLAIN[self.key]), classes="explain")


def line(widget: Static, text: str) -> None:
    widget.update(Content(text))


def show_history(sparkline: Sparkline, values: list[float]) -> None:
    """A sparkline of this chat's turns, oldest first; hidden until there are two turns to compare."""
    values = [v for v in values if v == v]  # NaN: a turn without that figure
    sparkline.display = len(values) >= 2
    sparkline.data = values


class LatencyPanel(Panel):
    def __init__(self) -> None:
        super().__init__("latency", "Latency")

    def compose(self) -> ComposeResult:
        yield Static(id="ttft", classes="figure")
        yield Sparkline([], id="ttft-history")
        yield Static(id="tpot", classes="figure")
        yield Sparkline([], id="tpot-history")
        yield Static(id="latency-note", classes="note")
        yield self.compose_explain()

    def show(self, session: ChatSession | None, live: LiveRequest | None = None) -> None:
        """The chat's last finished turn and its history; while a turn runs, its own figures so far."""
        history = session.conversation.finished_metrics() if session else []
        last: RequestMetrics | None = history[-1] if history else None
        turn = session.turn if session else None
        if turn is not None and live is not None and live.num_output_tokens:
            ttft, queue, tpot = live.ttft, None, live.tpot
            note = f"this turn: decoding, {live.num_output_tokens:,} tokens so far (TPOT live)"
        else:
            ttft, queue, tpot = (last.ttft, last.queue_time, last.tpot) if last else (None, None, None)
            if turn is None:
                note = f"last turn of {len(history)} in this chat" if history else "no turn yet in this chat"
            elif live is not None and not live.waiting:
                note = (f"this turn: prefilling {live.num_computed_prompt_tokens:,} of {live.num_prompt_tokens:,} "
                        f"prompt tokens ({live.num_cached_tokens:,} reused)")
            else:
                note = "this turn: waiting for its first token…"
        line(self.query_one("#ttft", Static),
             f"TTFT {fmt.seconds(ttft)} · queue + prefill" + (f"\n     (queued {fmt.seconds(queue)})" if queue and queue == queue else ""))
        line(self.query_one("#tpot", Static), f"TPOT {fmt.ms(tpot)} · one decode step")
        show_history(self.query_one("#ttft-history", Sparkline), [m.ttft for m in history])
        show_history(self.query_one("#tpot-history", Sparkline), [m.tpot for m in history])
        line(self.query_one("#latency-note", Static), note)


class PromptPanel(Panel):
    def __init__(self) -> None:
        super().__init__("prompt", "Prompt (last turn)")

    def compose(self) -> ComposeResult:
        yield Static(id="reused", classes="figure")
        yield SplitBar(("cached", "prefilled"), id="prompt-bar")
        yield Static(id="prompt-split", classes="note")
        yield self.compose_explain()

    def show(self, session: ChatSession | None) -> None:
        history = session.conversation.finished_metrics() if session else []
        m = history[-1] if history else None
        if m is None:
            line(self.query_one("#reused", Static), "no turn yet")
            self.query_one(SplitBar).set_counts((0, 0))
            line(self.query_one("#prompt-split", Static), "")
            return
        line(self.query_one("#reused", Static), fmt.reused(m))
        self.query_one(SplitBar).set_counts((m.num_cached_tokens, m.num_prefilled_tokens))
        extra = f" · preempted {m.num_preemptions}×" if m.num_preemptions else ""
        cached = (f"memory {m.num_memory_tokens:,} · disk {m.num_disk_tokens:,}" if m.num_disk_tokens
                  else f"cached {m.num_cached_tokens:,}")
        line(self.query_one("#prompt-split", Static), f"{cached} · prefilled {m.num_prefilled_tokens:,}{extra}")


class DecodePanel(Panel):
    def __init__(self) -> None:
        super().__init__("decode", "Engine")

    def compose(self) -> ComposeResult:
        yield Static(id="decode-rate", classes="figure")
        yield Static(id="requests", classes="note")
        yield Static(id="hit-rate", classes="note")
        yield Static(id="threads", classes="note")
        yield Static(Content(NOTES["decode"]), classes="note")
        yield self.compose_explain()

    def show(self, stats: EngineStats | None) -> None:
        if stats is None:
            line(self.query_one("#decode-rate", Static), "engine not ready")
            return
        spec = ""
        if stats.spec_acceptance_rate == stats.spec_acceptance_rate:  # not NaN: drafts were verified lately
            spec = (f"\nspeculative: drafts kept {fmt.percent(stats.spec_acceptance_rate)} · "
                    f"{stats.spec_tokens_per_step:.2f} tokens/step")
        line(self.query_one("#decode-rate", Static),
             f"decode {fmt.rate(stats.decode_tokens_per_s, 'tok/s')} · reads {fmt.rate(stats.decode_bandwidth_gb_s, 'GB/s')}"
             + spec)
        line(self.query_one("#requests", Static),
             f"running {stats.num_running} · waiting {stats.num_waiting} · preempted {stats.num_preemptions}")
        rate = stats.prefix_cache_hit_rate
        shown = fmt.percent(rate) if rate == rate else "not reported"  # NaN: a server that does not say
        line(self.query_one("#hit-rate", Static), f"prefix cache hit rate {shown}")
        line(self.query_one("#threads", Static), fmt.threads(stats))


class KVPanel(Panel):
    def __init__(self) -> None:
        super().__init__("kv", "KV cache")

    def compose(self) -> ComposeResult:
        yield SplitBar(("used", "cached", "free"), id="kv-bar")
        yield Static(id="kv-counts", classes="figure")
        yield Static(id="kv-size", classes="note")
        yield Static(id="kv-chats", classes="note")
        yield Static(Content(NOTES["kv"]), classes="note")
        yield self.compose_explain()

    def show(self, stats: EngineStats | None, sessions: list[ChatSession], resident: dict[int, tuple[int, ...]],
             tiers: dict[int, PrefixTiers] | None = None) -> None:
        if stats is None or stats.num_blocks_total is None:
            self.query_one(SplitBar).set_counts((0, 0, 0))
            line(self.query_one("#kv-counts", Static), NOT_REPORTED if stats else "engine not ready")
            return
        used, cached, free = stats.num_blocks_used, stats.num_blocks_cached_free, stats.num_blocks_free
        self.query_one(SplitBar).set_counts((used or 0, cached or 0, free or 0))  # (None: a server that does not say)
        line(self.query_one("#kv-counts", Static),
             f"used {fmt.count(used)} · cached {fmt.count(cached)} · free {fmt.count(free)}")
        per_token = stats.kv_bytes_per_token
        size = (f"of {stats.num_blocks_total:,} blocks × {fmt.count(stats.block_size)} tokens\n"
                + (f"K+V per token {fmt.nbytes(per_token)} (all layers)" if per_token else "K+V per token not reported"))
        if stats.disk is not None:
            size += "\n" + fmt.disk_tier(stats.disk)
        line(self.query_one("#kv-size", Static), size)
        text = (chat_tiers_text(sessions, resident, tiers or {}) if stats.disk is not None
                else chat_blocks_text(sessions, resident))
        line(self.query_one("#kv-chats", Static), text)


def chat_blocks_text(sessions: list[ChatSession], resident: dict[int, tuple[int, ...]]) -> str:
    """Per chat: the blocks holding its KV (its cached prefix, plus its reply's blocks while one is in flight),
    and how many of those another listed chat holds too (a shared system prompt, say)."""
    blocks: dict[int, set[int]] = {}
    for s in sessions:
        mine = set(resident.get(s.chat_id, ()))
        if mine:
            blocks[s.chat_id] = mine
    if not blocks:
        return "per chat: nothing cached yet"
    lines = ["per chat: blocks · shared"]
    for s in sessions:
        if s.chat_id not in blocks:
            continue
        mine = blocks[s.chat_id]
        others = set().union(*(b for cid, b in blocks.items() if cid != s.chat_id))
        live = " ●" if s.turn is not None else ""
        lines.append(f"#{s.chat_id:<3} {short_title(s, 15):15} {len(mine):>4} · {len(mine & others):>3}{live}")
    return "\n".join(lines)


def chat_tiers_text(sessions: list[ChatSession], resident: dict[int, tuple[int, ...]],
                    tiers: dict[int, PrefixTiers]) -> str:
    """With the disk tier on: per chat, its blocks in memory (and how many another chat shares), and of its
    prefix how many blocks are only on disk and how many are gone (recomputed on its next turn)."""
    listed = [s for s in sessions if resident.get(s.chat_id) or s.chat_id in tiers]
    if not listed:
        return "per chat: nothing cached yet"
    lines = [f"{'per chat':11} {'mem':>4} · {'shr':>3} · {'disk':>4} · gone"]
    for s in listed:
        mine = set(resident.get(s.chat_id, ()))
        others = set().union(*(set(resident.get(o.chat_id, ())) for o in listed if o is not s))
        t = tiers.get(s.chat_id)
        disk, gone = (t.num_disk_only, t.num_gone) if t is not None else (0, 0)
        live = " ●" if s.turn is not None else ""
        lines.append(f"#{s.chat_id:<3}{short_title(s, 8):8} {len(mine):>4} · {len(mine & others):>3} · "
                     f"{disk:>4} · {gone:>4}{live}")
    return "\n".join(lines)


def short_title(s: ChatSession, width: int) -> str:
    title = safe_text(s.conversation.title)
    return title if len(title) <= width else title[: width - 1] + "…"


class Panels(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield LatencyPanel()
        yield PromptPanel()
        yield DecodePanel()
        yield KVPanel()

    def show_chat(self, session: ChatSession | None, live: LiveRequest | None = None) -> None:
        self.query_one(LatencyPanel).show(session, live)
        self.query_one(PromptPanel).show(session)

    def show_engine(self, stats: EngineStats | None, sessions: list[ChatSession],
                    resident: dict[int, tuple[int, ...]], tiers: dict[int, PrefixTiers] | None = None) -> None:
        self.query_one(DecodePanel).show(stats)
        self.query_one(KVPanel).show(stats, sessions, resident, tiers)
