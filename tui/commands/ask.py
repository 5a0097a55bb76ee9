"""`llmchat ask`: one question, the reply streamed to stdout, timings to stderr.

The reply is model output: control sequences in it (CSI, OSC 52 clipboard writes, OSC 8 links, other C0/C1
codes) are shown as visible characters, on a terminal and in a pipe alike; `--raw` passes the text through
unchanged, but only when stdout is not a terminal.
"""
from __future__ import annotations

import argparse
import sys

from ...core.text.sanitize import SafeTextStream


class RawStream:
    """`--raw` into a pipe: the model's text exactly as it came."""

    def feed(self, delta: str) -> str:
        return delta

    def flush(self) -> str:
        return ""


def read_question(arg: str) -> str:
    question = sys.stdin.read() if arg == "-" else arg
    if not question.strip():
        raise ValueError("the question is empty")
    return question


def run_ask(args: argparse.Namespace) -> int:
    question = read_question(args.question)
    from ...core.api.params import SamplingParams

    params = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
        max_tokens=args.max_tokens, seed=args.seed, stop=tuple(args.stop),
    )
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if getattr(args, "backend", None):
        from ...core.backends.remote_ask import RemoteAskStream
        from ...core.text.prompt import chat_messages

        stream = RemoteAskStream(args.backend, chat_messages(question, args.system), params, args.api_key, args.model)
    else:
        from ...core.backends.ask import ask_stream
        from .cli import engine_config

        config = engine_config(args)  # the disk tier's and speculative decoding's flags, checked
        stream = ask_stream(question, params, system=args.system, model=args.model, device=args.device,
                            progress=progress, weight_dtype=getattr(args, "weights", None),
                            kv_disk_bytes=config.kv_disk_bytes, num_speculative_tokens=config.num_speculative_tokens,
                            draft_model=config.draft_model, num_threads=config.num_threads)
    model_line = None if getattr(args, "backend", None) else stream.model_line
    out = RawStream() if getattr(args, "raw", False) and not sys.stdout.isatty() else SafeTextStream()
    try:
        for delta in stream:
            sys.stdout.write(out.feed(delta))
            sys.stdout.flush()
    finally:  # the text so far stays on stdout even when the reply is cut short
        sys.stdout.write(out.flush() + "\n")
        sys.stdout.flush()
    if args.stats:
        m = stream.metrics
        if model_line:
            print(f"model {model_line}", file=sys.stderr)
        print(
            f"prompt {m.num_prompt_tokens} tokens ({m.num_memory_tokens} cached in memory, {m.num_disk_tokens} "
            f"from disk, {m.num_prefilled_tokens} computed), output {m.num_output_tokens} tokens; "
            f"TTFT {m.ttft * 1000:.0f} ms, TPOT {m.tpot * 1000:.1f} ms (load {m.load_seconds:.2f} s)",
            file=sys.stderr,
        )
        if not getattr(args, "backend", None):  # the embedded engine's compute team (a server keeps its own)
            print(stream.threads_text(), file=sys.stderr)
        if m.num_draft_tokens:
            from ..text.format import speculation

            print(f"speculative decoding: {speculation(m)}", file=sys.stderr)
    return 0
