"""`llmchat models [--json]`, `llmchat pull [NAME]` and `llmchat rm NAME`: the models on this machine by name."""
from __future__ import annotations

import argparse
import json
import sys

from ..text.format import nbytes


def params(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def _where() -> list[str]:
    from ...core.weights.hub import hf_cache_dir
    from ...core.weights.lmstudio import lmstudio_roots
    from ...core.weights.ollama import ollama_roots
    from ...core.weights.resolve import cache_dir

    def places(paths) -> str:
        return ", ".join(map(str, paths)) or "not found"

    return [f"llmchat's cache: {cache_dir() / 'models'} (LLMCHAT_CACHE_DIR)",
            f"the Hugging Face cache: {hf_cache_dir()} (HF_HUB_CACHE, HF_HOME)",
            f"Ollama's store: {places(ollama_roots())} (OLLAMA_MODELS)",
            f"LM Studio's folder: {places(lmstudio_roots())}"]


def run_models(args: argparse.Namespace) -> int:
    from ...core.weights.inventory import list_models

    entries, problems = list_models()
    if args.json:
        json.dump({"models": [e.as_json() for e in entries], "problems": problems, "looked_in": _where()},
                  sys.stdout, indent=1)
        print()
        return 0
    rows = [("NAME", "ARCH", "QUANT", "PARAMS", "SIZE", "CONTEXT", "WHOSE", "PATH")]
    for e in entries:
        rows.append((e.name, e.architecture or "?", e.quantization or "?", params(e.num_params), nbytes(e.size_bytes),
                     f"{e.context_length:,}" if e.context_length else "?", e.owner, e.path))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    for e in entries:
        if e.problem:
            print(f"{e.name}: {e.problem}", file=sys.stderr)
    for line in problems:
        print(f"skipped: {line}", file=sys.stderr)
    print("\nlooked in " + "; ".join(_where()))
    print("use one with `llmchat -m NAME`; `llmchat rm NAME` removes what llmchat downloaded (WHOSE = llmchat)")
    return 0


def run_pull(args: argparse.Namespace) -> int:
    from ...core.weights.locate import pull_model
    from ...core.weights.resolve import pull_default_model

    progress = lambda line: print(line, file=sys.stderr)  # noqa: E731
    if args.name is None:
        from ...core.weights.resolve import cache_dir
        from ...kernels.quant_cpu_build import load_cpu_kernels

        path = pull_default_model(progress=progress)
        print("building the quantized CPU kernels (once per machine) ...", file=sys.stderr)
        print(load_cpu_kernels(str(cache_dir() / "kernels")).note, file=sys.stderr)
        print(f"default model ready: {path}")
        return 0
    path = pull_model(args.name, progress=progress)
    print(f"{args.name} ready: {path}")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from ...core.kvdisk.owners import remove_model_entries
    from ...core.kvdisk.folder import default_kv_disk_dir
    from ...core.weights.remove import plan_removal, remove_files

    plan = plan_removal(args.name)
    num_blocks, kv_bytes = remove_model_entries(default_kv_disk_dir(), plan.model_folders)
    freed = remove_files(plan)
    for path in plan.files:
        print(f"removed {path}")
    print(f"removed {args.name}: {nbytes(freed)} of model files, {num_blocks:,} KV blocks ({nbytes(kv_bytes)}) "
          "from the disk tier")
    return 0
