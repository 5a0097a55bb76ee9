"""`llmchat bench shared-cpu` (core/bench/shared_cpu.py): the command, and each set-up's own process.

`python -m llmchat.tui.commands.bench_shared_cpu SETUP [bench flags]` runs one set-up (`ask`: the engine on the main
thread; `app`: a headless app, the engine on its thread) and prints its result as one JSON line.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import replace

from ...core.openmp_env import prepare_openmp

# the flags of `llmchat bench` that shape the engine, passed on to each set-up's process
_VALUE_FLAGS = ("model", "device", "kv_cache_gb", "weights", "threads", "draft_model", "speculative_tokens", "repeats")
_SWITCHES = ("no_speculative", "no_prefix_cache", "quick")


def child_flags(args: argparse.Namespace) -> list[str]:
    flags = []
    for name in _VALUE_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    flags += [f"--{name.replace('_', '-')}" for name in _SWITCHES if getattr(args, name, False)]
    return flags


def run_shared_cpu_bench(args: argparse.Namespace) -> int:
    """Both set-ups, each in its own process; the table (and JSON lines) of TPOT quiet, busy and the ratio."""
    from ...core.bench.bench import Results, cpu_description
    from ...core.bench.shared_cpu import SETUPS, add_rows, run_setup_child

    if args.scenarios != ["shared-cpu"]:
        raise ValueError("run `llmchat bench shared-cpu` on its own (it starts a busy process of its own)")
    if args.repeats is not None and args.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    log(f"CPU {cpu_description()}; each set-up decodes quiet, then beside one busy process (a spin loop)")
    results = Results()
    for setup in SETUPS:
        log(f"running the {setup} set-up ...")
        add_rows(results, run_setup_child(setup, child_flags(args), log))
    print(results.table())
    if args.json:
        results.write_json(args.json)
    return 0


LOAD_TIMEOUT_S = 600.0  # a first start may build the CPU kernels
REPLY_TIMEOUT_S = 1200.0  # a reply beside a busy process on a slow machine


async def until(pilot, condition, timeout_s: float, what: str) -> None:
    """Let the app run until condition() holds; a RuntimeError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the app's bench waited {timeout_s:.0f} s for {what}")
        await pilot.pause(0.05)


async def measure_app(config, size, log):
    """measure_phases over a headless app on a temporary data dir: each reply a new chat's turn, sent as the
    prompt box sends it; its TPOT is the one the Latency panel shows."""
    from ...core.bench.shared_cpu import QUESTION, measure_phases
    from ..app import LlmChatApp

    with tempfile.TemporaryDirectory(prefix="llmchat-bench-") as data:
        app = LlmChatApp(data, engine_config=config)
        async with app.run_test(headless=True, size=(150, 45)) as pilot:
            await until(pilot, lambda: app.bridge.ready or app.bridge.failure, LOAD_TIMEOUT_S, "the model to load")
            if app.bridge.failure:
                raise RuntimeError(f"the app could not load its model: {app.bridge.failure}")

            async def reply() -> tuple[float, int]:
                await app.action_new_chat()
                session = app.current
                session.conversation.settings = replace(session.settings, max_tokens=size.num_tokens,
                                                        temperature=0.0)
                if not app.turns.send(session, QUESTION):
                    raise RuntimeError("the app could not store the bench's turn")
                await until(pilot, lambda: not session.busy, REPLY_TIMEOUT_S, "a reply")
                reply = session.conversation.messages[-1]
                if reply.status != "done":
                    raise RuntimeError(f"the bench's reply ended {reply.status}: {reply.error or reply.finish_reason}")
                return session.conversation.finished_metrics()[-1].tpot, app.bridge.stats().num_threads

            result = await measure_phases("app", reply, size, log)
            await app.action_quit()
    return result


def child_main(argv: list[str]) -> int:
    setup, flags = argv[0], argv[1:]
    prepare_openmp(setup)  # before torch loads: each set-up runs with the policy its command gets
    from ...core.bench.shared_cpu import FULL, QUICK, ask_setup_reply, measure_phases, result_json
    from ..bridge import DEFAULT_MAX_NUM_SEQS
    from .cli import build_parser, engine_config

    args = build_parser().parse_args(["bench", "shared-cpu", *flags])
    size = QUICK if args.quick else FULL
    if args.repeats is not None:
        if args.repeats < 1:
            raise ValueError("--repeats must be at least 1")
        size = replace(size, repeats=args.repeats)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if setup == "ask":
        config = engine_config(args, kv_disk_bytes=0)  # (the disk tier would only keep the bench's prompts)
        result = asyncio.run(measure_phases("ask", ask_setup_reply(config, size), size, log))
    elif setup == "app":
        config = engine_config(args, kv_disk_bytes=0, max_num_seqs=DEFAULT_MAX_NUM_SEQS)
        result = asyncio.run(measure_app(config, size, log))
    else:
        raise ValueError(f"unknown set-up {setup!r}")
    print(result_json(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
