"""The `llmchat` command: the chat app by default, plus `ask`, `pull` and `bench`.

Nothing heavy is imported at module level: torch and the engine load only when a command needs them.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from ...core.config import DEFAULT_KV_DISK_GB, DEFAULT_MODEL_LABEL

EXIT_USAGE = 2
MODEL_HELP = ("the model, without --backend: a .gguf file or Hugging Face folder, org/repo[:QUANT] from the Hugging "
              "Face Hub (fetched into its cache on first use), ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO[:QUANT], "
              f"or a name `llmchat models` lists (default: {DEFAULT_MODEL_LABEL}); with --backend, the server's "
              "model name")


def package_version() -> str:
    try:
        return version("llmchat")
    except PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmchat",
        description="A terminal chat app with its own LLM inference engine (paged KV cache, prefix reuse).",
    )
    parser.add_argument("--version", action="version", version=f"llmchat {package_version()}")
    model_args = argparse.ArgumentParser(add_help=False)
    model_args.add_argument("-m", "--model", metavar="NAME", help=MODEL_HELP)
    model_args.add_argument("--device", default=None, help="cpu or cuda (default: cpu)")
    model_args.add_argument(
        "--kv-cache-gb", type=float, default=None, help="KV cache budget in GB (default: 1 on CPU, 8 on CUDA)"
    )
    model_args.add_argument(
        "--weights", choices=("auto", "float32", "bfloat16"), default="auto",
        help="weight format (default auto: a GGUF's quantized blocks computed as stored on the CPU, float "
        "checkpoints in the compute dtype; float32: dequantized at load, the exact reference; bfloat16: half the "
        "memory of fp32, fast on AMX/AVX-512-BF16 CPUs, not bit-compatible)",
    )
    model_args.add_argument(
        "--no-prefix-cache", action="store_true", help="turn off prefix reuse (to compare TTFT with and without it)"
    )
    model_args.add_argument(
        "--draft-model", metavar="PATH", help="speculative decoding with this draft model (same vocabulary; "
        "default: prompt lookup, drafts copied from the chat itself)"
    )
    model_args.add_argument(
        "--speculative-tokens", type=int, default=None, metavar="N",
        help="most tokens drafted per step (default 4, adapted per reply; 0 = off)"
    )
    model_args.add_argument("--no-speculative", action="store_true", help="turn off speculative decoding")
    model_args.add_argument(
        "--kv-disk-gb", type=float, default=None,
        help=f"budget of the prefix cache's disk tier in GB (default {DEFAULT_KV_DISK_GB:g}; LRU-evicted)",
    )
    model_args.add_argument("--no-kv-disk", action="store_true", help="turn off the prefix cache's disk tier")
    model_args.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="compute threads (default: auto, the CPUs this process may use, fewer while other programs are busy)",
    )
    parser.add_argument("-m", "--model", metavar="NAME", help=MODEL_HELP)
    parser.add_argument("--device", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kv-cache-gb", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-prefix-cache", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--draft-model", help=argparse.SUPPRESS)
    parser.add_argument("--speculative-tokens", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-speculative", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kv-disk-gb", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-kv-disk", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help="where chats are stored (default: $LLMCHAT_DATA_DIR, else the user data dir)")
    parser.add_argument("--no-typeahead", action="store_true",
                        help="do not prefill a draft while it is typed (the cost preview stays)")
    add_remote_args(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ask = sub.add_parser("ask", parents=[model_args], help="ask one question; the reply streams to stdout")
    add_remote_args(ask)
    ask.add_argument("question", help="the question, or - to read it from stdin")
    ask.add_argument("-s", "--system", help="system prompt (default: the model's own)")
    ask.add_argument("--temperature", type=float, default=None, help="0 = greedy (default 0.7)")
    ask.add_argument("--top-p", type=float, default=None, help="(default 1.0)")
    ask.add_argument("--top-k", type=int, default=None, help="(default 0: off)")
    ask.add_argument("--max-tokens", type=int, default=None, help="(default 512)")
    ask.add_argument("--seed", type=int, default=None)
    ask.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    ask.add_argument("--stats", action="store_true", help="print TTFT and TPOT to stderr")
    ask.add_argument("--raw", action="store_true", help="write the reply's bytes unfiltered when stdout is a pipe")

    serve = sub.add_parser("serve", parents=[model_args], help="serve the embedded engine as an OpenAI-compatible API")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = a free one, printed)")
    serve.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 requests "
                       "(default: $LLMCHAT_API_KEY if set)")
    serve.add_argument("--served-model-name", default=None, help="the model's name in the API (default: its file name)")
    serve.add_argument("--max-num-seqs", type=int, default=16, help="requests decoded together (default 16)")
    serve.add_argument("--max-pending", type=int, default=512, help="requests in flight before 429 (default 512)")
    serve.add_argument("--max-connections", type=int, default=256, help="open connections before new ones get "
                       "503 at once (default 256)")
    serve.add_argument("--header-timeout", type=float, default=10.0, help="seconds a connection may take to send "
                       "a request's headers before it is closed (default 10)")

    pull = sub.add_parser("pull", help="download a model by name (default: the default model, and build the CPU "
                          "kernels now, else done on first use)")
    pull.add_argument("name", nargs="?", metavar="NAME", help="org/repo[:QUANT] from the Hugging Face Hub (into the "
                      "shared HF cache; HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE apply); ollama:/lmstudio: names are "
                      "only looked up, never copied")
    models = sub.add_parser("models", help="every model found: llmchat's cache, the HF cache, Ollama, LM Studio")
    models.add_argument("--json", action="store_true", help="one JSON object (models, problems, places looked in)")
    rm = sub.add_parser("rm", help="remove a model llmchat downloaded and its disk-tier KV (never another app's)")
    rm.add_argument("name", metavar="NAME", help="a name `llmchat models` lists")

    export = sub.add_parser("export", help="write a chat as Markdown or JSON (without CHAT_ID: list the chats)")
    export.add_argument("chat_id", nargs="?", type=int, metavar="CHAT_ID", help="the chat's id (shown as #ID in the app)")
    export.add_argument("--format", choices=("markdown", "json"), default="markdown")
    export.add_argument("-o", "--output", help="write to this file (default: stdout)")
    export.add_argument("--data-dir", default=argparse.SUPPRESS, help="where chats are stored")

    imported = sub.add_parser("import", help="add a chat from an llmchat export (JSON: with its token ids; Markdown)")
    imported.add_argument("file", metavar="FILE", help="a file `llmchat export` (or the app's Export) wrote")
    imported.add_argument("--data-dir", default=argparse.SUPPRESS, help="where chats are stored")

    sub.add_parser("config", help="show the config file's path and the effective settings (flags > file > defaults)")

    cache = sub.add_parser("cache", help="the prefix cache's disk tier: size, entries, hit counts; --clear empties it")
    cache.add_argument("--clear", action="store_true", help="remove every stored KV block")

    bench = sub.add_parser("bench", parents=[model_args], help="measure TTFT, TPOT and throughput; print a table")
    bench.add_argument("scenarios", nargs="*", help="prefill decode chat concurrent switch (default: all); "
                       "serve: concurrent streaming clients against llmchat serve (or --url), on its own; "
                       "shared-cpu: TPOT quiet and beside a busy process it starts (ask and app set-ups), on its own")
    bench.add_argument("--url", help="with serve: measure this OpenAI-compatible server instead of starting one")
    bench.add_argument("--quick", action="store_true", help="a tiny version (for CI)")
    bench.add_argument("--repeats", type=int, default=None, help="runs per measurement (medians are reported)")
    bench.add_argument("--json", metavar="FILE", help="write one JSON object per measurement per line")
    bench.add_argument("--kernels", action="store_true", help="time the Triton kernels instead (needs CUDA)")
    return parser


def add_remote_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", metavar="URL", nargs="?", const="openai",
                        help="chat through an OpenAI-compatible server (vLLM, SGLang, llama-server, Ollama, llmchat "
                        "serve) instead of the embedded engine; `openai` (or no value) is $OPENAI_BASE_URL, `ollama` "
                        "Ollama's address ($OLLAMA_HOST); --model then names the server's model (default: the first "
                        "it lists), not a local file")
    parser.add_argument("--api-key", default=None, help="the server's API key (default: $OPENAI_API_KEY if set)")


def engine_config(args: argparse.Namespace, **overrides):
    """The EngineConfig that the command-line flags ask for."""
    from ...core.config import EngineConfig

    kv_gb = getattr(args, "kv_cache_gb", None)
    if kv_gb is not None and kv_gb <= 0:
        raise ValueError("--kv-cache-gb must be positive")
    overrides.setdefault("num_speculative_tokens", num_speculative_tokens(args))
    overrides.setdefault("kv_disk_bytes", kv_disk_bytes(args))
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be at least 1, got {threads}")
    overrides.setdefault("num_threads", threads)
    return EngineConfig(
        model=getattr(args, "model", None),
        draft_model=getattr(args, "draft_model", None),
        device=getattr(args, "device", None) or "cpu",
        kv_cache_bytes=None if kv_gb is None else int(kv_gb * 1e9),
        enable_prefix_caching=not getattr(args, "no_prefix_cache", False),
        weight_dtype=getattr(args, "weights", None) or "auto",
        **overrides,
    )


def num_speculative_tokens(args: argparse.Namespace) -> int:
    """The most tokens drafted per step that the flags ask for (0: off). Speculative decoding is on by
    default (a verify step costs about one plain step: kernels/linear.py, core/engine/spec/speculative.py);
    --speculative-tokens N sets the most drafted; --no-speculative wins over every other flag."""
    from ...core.config import DEFAULT_SPECULATIVE_TOKENS

    spec_tokens = getattr(args, "speculative_tokens", None)
    if getattr(args, "no_speculative", False):
        return 0
    if spec_tokens is not None:
        return spec_tokens
    return DEFAULT_SPECULATIVE_TOKENS


def kv_disk_bytes(args: argparse.Namespace) -> int:
    """The disk tier's budget the flags ask for (0: off)."""
    gb = getattr(args, "kv_disk_gb", None)
    if gb is not None and not gb > 0:  # (NaN included)
        raise ValueError("--kv-disk-gb must be positive (use --no-kv-disk to turn the disk tier off)")
    if getattr(args, "no_kv_disk", False) or getattr(args, "no_prefix_cache", False):
        return 0
    return int((DEFAULT_KV_DISK_GB if gb is None else gb) * 1e9)


# subcommand -> (its module, relative to this package; its run function). Each is imported only when run, so
# `ask --backend` and `serve` load neither Textual nor the engine they do not use. None: the app.
COMMANDS: dict[str | None, tuple[str, str]] = {
    None: ("..run", "run_app"),
    "ask": (".ask", "run_ask"),
    "serve": (".serve", "run_serve"),
    "bench": (".bench", "run_bench"),
    "config": (".config", "run_config"),
    "pull": (".models", "run_pull"),
    "models": (".models", "run_models"),
    "rm": (".models", "run_rm"),
    "cache": (".cache", "run_cache"),
    "import": (".import_", "run_import"),
    "export": (".export", "run_export"),
}
FILLED_FROM_CONFIG = (None, "ask", "serve", "bench")


def main(argv: list[str] | None = None) -> int:
    from ...core.openmp_env import prepare_openmp, setup_of

    args = build_parser().parse_args(argv)
    os.umask(os.umask(0o022) | 0o022)  # nothing llmchat writes (the model cache included) is group/world-writable
    prepare_openmp(setup_of(args.command))  # OpenMP's spin time: read once, when torch loads, so before that
    try:
        if getattr(args, "backend", None) is not None:
            from .backend_arg import backend_url

            args.backend = backend_url(args.backend)
        if args.command in FILLED_FROM_CONFIG:  # the config file fills the flags not given
            from .config import load_into_args

            load_into_args(args)
        module, function = COMMANDS[args.command]
        return getattr(importlib.import_module(module, __package__), function)(args)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # bad input and load failures: one line, no traceback
        from ...core.weights.resolve import ModelLoadError

        if isinstance(e, (ModelLoadError, ValueError)):
            print(f"llmchat: {e}", file=sys.stderr)
            return EXIT_USAGE
        raise


if __name__ == "__main__":
    sys.exit(main())
