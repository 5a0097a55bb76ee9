"""`llmchat bench`: scenarios on a real model, medians of repeated runs, a table and optional JSON lines.

Every figure is measured by the engine itself (core/api/metrics.py: TTFT = first token - arrival,
TPOT = (last - first) / (tokens - 1), one clock: time.perf_counter).
"""
from __future__ import annotations

import copy
import shutil
import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..chats.conversation import Conversation
from ..config import DEFAULT_SPECULATIVE_TOKENS, EngineConfig
from ..model.dense import generate_dense
from ..engine.engine import LLMEngine
from ..kvdisk.folder import default_kv_disk_dir
from ..kvdisk.tier import DEFAULT_KV_DISK_BYTES
from ..model.loader import LoadedModel
from .common import Results, chat_turn, cpu_description, filler_text, fixed, prompt_of_length, run_all
from .speculative import run_speculative
from .typeahead import run_typeahead

SCENARIOS = ("prefill", "decode", "chat", "concurrent", "switch", "memory", "speculative", "restart", "typeahead")
# A fresh process per memory figure (max RSS is a per-process high-water mark): `ask` sizes its KV cache to one
# request; the app-like setup takes the default engine config (default KV budget) and runs one turn.
_MEMORY_SCRIPT = """
import resource, sys
from llmchat.core.api.params import SamplingParams
from llmchat.core.backends.ask import ask_stream
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.model.loader import load_model_for
from llmchat.core.text.prompt import prompt_ids_for
kind, model, weights = sys.argv[1], sys.argv[2] or None, sys.argv[3]
params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
if kind == "ask":
    "".join(ask_stream("hi", params, model=model, weight_dtype=weights))
else:
    config = EngineConfig(model=model, weight_dtype=weights)
    loaded = load_model_for(config)
    engine = LLMEngine(loaded, config)
    engine.add_request(prompt_ids_for(loaded.tokenizer, [{"role": "user", "content": "hi"}]), params)
    for _ in engine.run_until_done():
        pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
@dataclass(frozen=True, slots=True)
class BenchSize:
    """How big each scenario runs; `quick` keeps CI fast, `full` matches the issue's sizes."""

    prefill_tokens: tuple[int, ...]
    decode_contexts: tuple[int, ...]
    decode_tokens: int
    chat_turns: int
    chat_message_tokens: int
    chat_reply_tokens: int
    concurrent_chats: tuple[int, ...]
    concurrent_tokens: int
    switch_history_tokens: int
    switch_rounds: int
    repeats: int
    restart_history_tokens: int
    restart_reply_tokens: int
    typeahead_message_tokens: int = 300


FULL = BenchSize((40, 512, 2048), (40, 2000), 32, 8, 60, 64, (1, 2, 4, 8), 64, 500, 2, 3, 2000, 64)
QUICK = BenchSize((40, 128), (40, 200), 8, 3, 20, 8, (1, 2), 8, 64, 1, 1, 200, 8, 60)


class Bench:
    def __init__(self, loaded: LoadedModel, size: BenchSize, log: Callable[[str], None] = lambda _: None,
                 config: EngineConfig = EngineConfig()):
        self.loaded = loaded
        # the disk tier only where a scenario asks for it (restart): elsewhere it would turn a cold prompt of an
        # earlier bench run into disk hits
        self.kv_disk_bytes = config.kv_disk_bytes or DEFAULT_KV_DISK_BYTES
        # speculation likewise (the speculative scenario compares it on and off): decode figures stay one
        # forward per token, comparable with other engines' plain decoding
        self.spec_tokens = config.num_speculative_tokens or DEFAULT_SPECULATIVE_TOKENS
        self.config = dataclasses.replace(config, kv_disk_bytes=0, num_speculative_tokens=0)
        self.size = size
        self.log = log
        self.results = Results()
        self.salt = 0

    def engine(self, **overrides) -> LLMEngine:
        return LLMEngine(self.loaded, dataclasses.replace(self.config, **overrides))

    def next_salt(self) -> int:
        self.salt += 1
        return self.salt

    def run(self, scenarios: tuple[str, ...]) -> Results:
        self.log(f"cpu: {cpu_description()}; weights {self.loaded.weight_dtype}, activations {self.loaded.dtype}")
        # warm-up: first calls pay one-time costs (oneDNN primitives, allocator growth)
        run_all(self.engine(), [(prompt_of_length(self.loaded, n, 0), fixed(4)) for n in (16, 64)])
        for name in scenarios:
            self.log(f"running {name} ...")
            getattr(self, name)()
        return self.results

    def prefill(self) -> None:
        for n in self.size.prefill_tokens:
            ttfts = []
            for _ in range(self.size.repeats):
                (r,), _ = run_all(self.engine(), [(prompt_of_length(self.loaded, n, self.next_salt()), fixed(1))])
                ttfts.append(r.metrics.ttft * 1e3)
            self.results.add("prefill", f"tokens={n}", "ttft", ttfts, "ms")

    def decode(self) -> None:
        n_out = self.size.decode_tokens
        for ctx in self.size.decode_contexts:
            tpots = []
            for _ in range(self.size.repeats):
                (r,), _ = run_all(self.engine(), [(prompt_of_length(self.loaded, ctx, self.next_salt()), fixed(n_out))])
                tpots.append(r.metrics.tpot * 1e3)
            self.results.add("decode", f"context={ctx}", "tpot", tpots, "ms")
            # a decode step reads every weight once (packed copy where there is one), plus the K/V so far
            weight_mb = self.loaded.model.weight_bytes() / 1e6
            kv_mb = self.loaded.config.kv_bytes_per_token(self.loaded.model.dtype.itemsize) * (ctx + n_out / 2) / 1e6
            self.results.add("decode", f"context={ctx}", "weight_bytes_per_token", [weight_mb], "MB")
            self.results.add("decode", f"context={ctx}", "kv_bytes_per_token", [kv_mb], "MB")
            self.results.add("decode", f"context={ctx}", "achieved_bandwidth",
                             [(weight_mb + kv_mb) / t for t in tpots], "GB/s")
        ctx = self.size.decode_contexts[0]  # the dense reference (contiguous cache, no batching) at short context
        tpots = []
        for _ in range(self.size.repeats):
            times = []
            for _tok in generate_dense(self.loaded.model, prompt_of_length(self.loaded, ctx, self.next_salt()),
                                       fixed(n_out)):
                times.append(time.perf_counter())
            tpots.append((times[-1] - times[0]) / (len(times) - 1) * 1e3)
        self.results.add("decode", f"dense-ref,context={ctx}", "tpot", tpots, "ms")

    def chat(self) -> None:
        s = self.size
        for variant, caching in (("cache-on", True), ("cache-off", False)):
            per_turn: list[list[float]] = [[] for _ in range(s.chat_turns)]
            for _ in range(s.repeats):
                engine, chat, salt = self.engine(enable_prefix_caching=caching), Conversation(0), self.next_salt()
                for turn in range(s.chat_turns):
                    r = chat_turn(engine, chat, filler_text(s.chat_message_tokens, salt * 100 + turn),
                                  s.chat_reply_tokens)
                    per_turn[turn].append(r.metrics.ttft * 1e3)
            for turn, values in enumerate(per_turn, start=1):
                self.results.add("chat", variant, "ttft", values, "ms", turn=turn)

    def concurrent(self) -> None:
        s = self.size
        for n in s.concurrent_chats:
            agg, tpot, per_chat = [], [], []
            for _ in range(s.repeats):
                requests = [(prompt_of_length(self.loaded, 40, self.next_salt()), fixed(s.concurrent_tokens))
                            for _ in range(n)]
                results, seconds = run_all(self.engine(), requests)
                agg.append(sum(r.metrics.num_output_tokens for r in results) / seconds)
                tpots = [r.metrics.tpot for r in results]
                tpot.append(statistics.median(tpots) * 1e3)
                per_chat.append(statistics.median(1 / t for t in tpots))
            self.results.add("concurrent", f"chats={n}", "aggregate_tokens_per_s", agg, "tok/s")
            self.results.add("concurrent", f"chats={n}", "per_chat_tokens_per_s", per_chat, "tok/s")
            self.results.add("concurrent", f"chats={n}", "tpot", tpot, "ms")

    def memory(self) -> None:
        """Max RSS of a fresh process: `ask "hi"` (16 tokens) and the app-like engine (default KV budget)."""
        for kind in ("ask", "app-engine"):
            out = subprocess.run(
                [sys.executable, "-c", _MEMORY_SCRIPT, kind, self.config.model or "", self.config.weight_dtype],
                capture_output=True, text=True, check=True,
            ).stdout
            self.results.add("memory", kind, "max_rss", [int(out.split()[-1]) / 1e3], "MB")

    def switch(self) -> None:
        """4 chats with long histories take turns; all stay resident in the KV cache, so each turn
        should cost about what a warm turn of a single chat costs."""
        s = self.size
        per_turn: dict[int, list[float]] = {}
        single: list[float] = []
        for _ in range(s.repeats):
            engine = self.engine()
            chats = []
            for _c in range(4):  # build the histories
                chat = Conversation(0)
                chat_turn(engine, chat, filler_text(s.switch_history_tokens, self.next_salt()), 16)
                chats.append(chat)
            turn = 0
            for round_ in range(s.switch_rounds):
                for c, chat in enumerate(chats):
                    turn += 1
                    r = chat_turn(engine, chat, filler_text(30, 1000 * round_ + c), 16)
                    per_turn.setdefault(turn, []).append(r.metrics.ttft * 1e3)
            # the baseline: one chat alone, its next turn right after its previous one (warm)
            single.append(chat_turn(engine, chats[0], filler_text(30, 99_999), 16).metrics.ttft * 1e3)
        for turn, values in per_turn.items():
            self.results.add("switch", "chats=4", "ttft", values, "ms", turn=turn)
        self.results.add("switch", "chats=1-warm", "ttft", single, "ms")

    def typeahead(self) -> None:
        """TTFT after Enter with prefill while typing on vs off; another chat's TPOT while typing (core/bench/typeahead.py)."""
        run_typeahead(self)

    def speculative(self) -> None:
        """Speculative decoding on vs off: repeat a text, repeat or edit code, a plain turn (core/bench/speculative.py)."""
        run_speculative(self)

    def restart(self) -> None:
        """A chat of ~2,000 tokens, then the app restarts (a new engine: the paged cache is empty, the OS page cache
        is left as it is) and the chat's next turn runs: with the disk tier (variant disk) and without (cold); with
        the disk tier after the chat was selected for 2 s (warm-on-focus: its blocks read back in idle steps); and
        in a chat that never left memory (in-memory: the same history and turn, no restart)."""
        s = self.size
        values: dict[str, dict[str, list[float]]] = {"disk": {"ttft": [], "tpot": [], "disk_tokens": []},
                                                     "cold": {"ttft": [], "tpot": []},
                                                     "warm-on-focus": {"ttft": [], "tpot": []},
                                                     "in-memory": {"ttft": [], "tpot": []}}
        parent = default_kv_disk_dir().parent
        parent.mkdir(parents=True, exist_ok=True)
        for _ in range(s.repeats):
            with tempfile.TemporaryDirectory(prefix="bench-kv-", dir=parent) as tier:
                disk = {"kv_disk_bytes": self.kv_disk_bytes, "kv_disk_dir": tier}
                engine, chat = self.engine(**disk), Conversation(0)
                history = filler_text(s.restart_history_tokens - 40, self.next_salt())
                chat_turn(engine, chat, history, 16)
                engine.close()  # quitting: the writes land
                question = filler_text(20, self.next_salt())
                for variant, overrides in (("disk", disk), ("cold", {}), ("warm-on-focus", disk), ("in-memory", {})):
                    if overrides:  # each variant reads the tier as the history left it (not the turn before)
                        copied = shutil.copytree(tier, f"{tier}-{variant}")
                        overrides = dict(overrides, kv_disk_dir=copied)
                    turn = copy.deepcopy(chat)
                    engine = self.engine(**overrides)  # the restarted app: nothing resident
                    if variant == "warm-on-focus":  # the user selects the chat and starts typing for 2 s
                        engine.warm(0, list(turn.token_ids))
                        deadline = time.perf_counter() + 2.0
                        while engine.has_work and time.perf_counter() < deadline:
                            engine.step()
                    elif variant == "in-memory":  # the same chat in an app that was never closed
                        turn = Conversation(0)
                        chat_turn(engine, turn, history, 16)
                    m = chat_turn(engine, turn, question, s.restart_reply_tokens).metrics
                    self.log(f"restart {variant}: reused {m.num_cached_tokens} of {m.num_prompt_tokens} ({m.num_disk_tokens} from disk), TTFT {m.ttft * 1e3:.0f} ms")
                    engine.close()
                    if overrides:
                        shutil.rmtree(overrides["kv_disk_dir"], ignore_errors=True)
                    values[variant]["ttft"].append(m.ttft * 1e3)
                    values[variant]["tpot"].append(m.tpot * 1e3)
                    if variant == "disk":
                        values[variant]["disk_tokens"].append(m.num_disk_tokens)
        units = {"ttft": "ms", "tpot": "ms", "disk_tokens": "tokens"}
        for variant, metrics in values.items():
            for metric, vals in metrics.items():
                self.results.add("restart", variant, metric, vals, units[metric])
