"""`llmchat bench`: run the chosen scenarios, print the table, optionally write JSON lines."""
from __future__ import annotations

import argparse
import dataclasses
import sys


def run_bench(args: argparse.Namespace) -> int:
    if args.kernels:
        from llmchat.kernels.bench import main as kernels_bench

        return kernels_bench([] if not args.json else ["--json", args.json]) or 0
    from llmchat.core.bench import FULL, QUICK, SCENARIOS, Bench
    from llmchat.core.loader import load_model_for

    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    size = QUICK if args.quick else FULL
    if args.repeats is not None:
        if args.repeats < 1:
            raise ValueError("--repeats must be at least 1")
        size = dataclasses.replace(size, repeats=args.repeats)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    from llmchat.tui.cli import engine_config

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
