"""`llmchat bench shared-cpu`: decode TPOT on a quiet machine and beside one busy process, and their ratio.

Two set-ups, each in a fresh process (a process keeps the OpenMP team of every thread that ran torch ops, and
the wait policy is fixed when torch loads, so one set-up must not leave its threads to the next):
- `ask`: the engine stepped on the main thread, as `llmchat ask` runs it;
- `app`: a headless app (Textual's loop on the main thread, the engine on its own thread, the panels
  refreshing), as `llmchat` runs it (tui/commands/bench_shared_cpu.py).
Each set-up decodes `repeats` greedy replies quiet, then starts a busy process of its own (core/bench/busy_process.py:
always ended), lets the engine notice it for `settle_s`, decodes one reply to warm up, then `repeats` replies
beside it. TPOT is the engine's own (core/api/metrics.py); medians are reported.
"""
from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from .busy_process import busy_process

SETUPS = ("ask", "app")
QUESTION = "Tell me a long story about a dragon who learns to bake bread, with many details."
CHILD_MODULE = "llmchat.tui.commands.bench_shared_cpu"


@dataclass(frozen=True, slots=True)
class SharedCpuSize:
    num_tokens: int  # tokens per reply
    repeats: int  # replies per phase
    settle_s: float  # how long the busy process runs before the busy phase starts


FULL = SharedCpuSize(64, 3, 1.5)
QUICK = SharedCpuSize(6, 1, 0.3)


@dataclass(slots=True)
class PhaseResult:
    """One set-up's figures (ms) and its compute team at the end of each phase."""

    setup: str
    quiet_tpot: list[float]
    busy_tpot: list[float]
    quiet_threads: int
    busy_threads: int
    busy_pid: int  # the busy process it started (ended when the phase was over)


# One reply: () -> (TPOT in seconds, the compute team's size as the reply ended); awaited (the app's loop
# must go on while the app replies).
ReplyFn = Callable[[], Awaitable[tuple[float, int]]]


async def measure_phases(setup: str, reply: ReplyFn, size: SharedCpuSize, log: Callable[[str], None]) -> PhaseResult:
    """`repeats` replies quiet, then the same beside a busy process (started and ended here)."""
    async def phase(name: str) -> tuple[list[float], int]:
        tpots, threads = [], 0
        for _ in range(size.repeats):
            tpot, threads = await reply()
            if tpot == tpot:  # (NaN: a reply of one token has no TPOT)
                tpots.append(tpot * 1e3)
        log(f"{setup} {name}: TPOT {', '.join(f'{t:.1f}' for t in tpots)} ms, {threads} thread(s)")
        return tpots, threads

    await reply()  # warm-up: first calls pay one-time costs
    quiet, quiet_threads = await phase("quiet")
    with busy_process() as busy:
        log(f"busy process {busy.pid} started")
        await asyncio.sleep(size.settle_s)
        await reply()
        loaded, busy_threads = await phase("beside a busy process")
    log(f"busy process {busy.pid} ended")
    if not quiet or not loaded:
        raise RuntimeError(f"the {setup} set-up's replies were too short to time (a TPOT needs two tokens)")
    return PhaseResult(setup, quiet, loaded, quiet_threads, busy_threads, busy.pid)


def ask_setup_reply(config, size: SharedCpuSize) -> ReplyFn:
    """The engine stepped on this thread, sized and configured as `llmchat ask` sizes it (one request)."""
    import dataclasses

    from ..api.params import SamplingParams
    from ..engine.engine import LLMEngine
    from ..model.loader import load_model_for
    from ..text.prompt import chat_messages, prompt_ids_for

    loaded = load_model_for(config)
    prompt = prompt_ids_for(loaded.tokenizer, chat_messages(QUESTION))
    kv_bytes = loaded.config.kv_bytes_per_token(loaded.model.dtype.itemsize) * (len(prompt) + size.num_tokens + 16)
    engine = LLMEngine(loaded, dataclasses.replace(config, max_num_seqs=1, kv_cache_bytes=kv_bytes))
    params = SamplingParams(temperature=0, max_tokens=size.num_tokens, ignore_eos=True)

    async def reply() -> tuple[float, int]:
        engine.add_request(list(prompt), params)
        tpot = float("nan")
        while engine.has_work:
            for event in engine.step():
                if type(event).__name__ == "Finished":
                    tpot = event.metrics.tpot
        return tpot, engine.threads.num_threads

    return reply


def run_setup_child(setup: str, flags: list[str], log: Callable[[str], None], timeout: float = 1800) -> PhaseResult:
    """Run one set-up in a fresh process (`python -m llmchat.tui.commands.bench_shared_cpu SETUP FLAGS...`); its result."""
    proc = subprocess.Popen([sys.executable, "-m", CHILD_MODULE, setup, *flags], stdout=subprocess.PIPE, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:  # Ctrl+C or a timeout here: the child (and, through it, its busy process) goes too
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"the {setup} set-up failed (exit {proc.returncode}); its error is above")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"the {setup} set-up printed no result")
    return PhaseResult(**json.loads(lines[-1]))


def result_json(result: PhaseResult) -> str:
    return json.dumps(asdict(result))


def add_rows(results, r: PhaseResult) -> None:
    """Rows of the bench table (core/bench/bench.py Results) for one set-up."""
    quiet, busy = statistics.median(r.quiet_tpot), statistics.median(r.busy_tpot)
    results.add("shared-cpu", r.setup, "tpot_quiet", r.quiet_tpot, "ms")
    results.add("shared-cpu", r.setup, "tpot_busy", r.busy_tpot, "ms")
    results.add("shared-cpu", r.setup, "slowdown_busy", [busy / quiet], "x")
    results.add("shared-cpu", r.setup, "threads_quiet", [r.quiet_threads], "threads")
    results.add("shared-cpu", r.setup, "threads_busy", [r.busy_threads], "threads")
