"""`llmchat bench`: run the chosen scenarios, print the table, optionally write JSON lines."""
from __future__ import annotations

import argparse
import dataclasses
import sys


def run_bench(args: argparse.Namespace) -> int:
    if args.kernels:
        from ...kernels.bench import main as kernels_bench

        return kernels_bench([] if not args.json else ["--json", args.json]) or 0
    if "serve" in args.scenarios:
        return run_serve_bench(args)
    if "shared-cpu" in args.scenarios:
        from .bench_shared_cpu import run_shared_cpu_bench

        return run_shared_cpu_bench(args)
    from ...core.bench.bench import FULL, QUICK, SCENARIOS, Bench
    from ...core.model.loader import load_model_for

    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    size = QUICK if args.quick else FULL
    if args.repeats is not None:
        if args.repeats < 1:
            raise ValueError("--repeats must be at least 1")
        size = dataclasses.replace(size, repeats=args.repeats)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    from .cli import engine_config

    config = engine_config(args)
    loaded = load_model_for(config, progress=log)
    import torch

    log(f"model {loaded.folder.name}: {loaded.config.num_hidden_layers} layers, device {args.device or 'cpu'}, "
        f"{torch.get_num_threads()} threads, {size.repeats} repeat(s); medians below")
    results = Bench(loaded, size, log, config).run(tuple(args.scenarios) or SCENARIOS)
    print(results.table())
    if args.json:
        results.write_json(args.json)
    return 0


def run_serve_bench(args: argparse.Namespace) -> int:
    """`llmchat bench serve [--url URL]`: concurrent streaming clients against a server (core/bench/serve.py)."""
    from ...core.bench.common import Results, cpu_description
    from ...core.bench.serve import SERVE_FULL, SERVE_QUICK, bench_serve, spawn_server

    if args.scenarios != ["serve"]:
        raise ValueError("run `llmchat bench serve` on its own (it starts a server or measures --url)")
    size = SERVE_QUICK if args.quick else SERVE_FULL
    if args.repeats is not None:
        size = dataclasses.replace(size, repeats=max(1, args.repeats))
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    proc = None
    url = args.url
    if url is None:
        flags = [f for flag, value in (("--model", args.model), ("--device", args.device),
                                       ("--kv-cache-gb", args.kv_cache_gb), ("--weights", args.weights))
                 if value is not None for f in (flag, str(value))]
        flags += ["--no-prefix-cache"] if args.no_prefix_cache else []
        proc, url = spawn_server(flags + ["--max-num-seqs", str(max(size.clients))], log)
    log(f"CPU {cpu_description()}; clients {size.clients}, {size.rounds} request(s) each of {size.max_tokens} tokens, "
        f"{size.repeats} repeat(s); medians below")
    results = Results()
    try:
        bench_serve(url, size, results, log)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    print(results.table())
    if args.json:
        results.write_json(args.json)
    return 0
