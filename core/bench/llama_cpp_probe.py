"""llama.cpp on the same GGUF, for side-by-side figures: TPOT, prefill TTFT and max RSS in a fresh process.

    /path/to/venv-with-llama-cpp-python/bin/python core/bench/llama_cpp_probe.py FILE.gguf [--tokens 64]
        [--prompt-tokens 40] [--threads 2] [--repeats 3]

llama-cpp-python is never a dependency of llmchat: run this file with the interpreter of a scratch venv that
has it (this file imports nothing from llmchat). Greedy decoding of `--tokens` tokens after a prompt of about
`--prompt-tokens` tokens; TPOT = (last token time - first token time) / (tokens - 1), the same definition as
`llmchat bench decode`; one JSON line per repeat, then the medians.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

WORDS = ("the quick brown fox jumps over a lazy dog while engineers measure caches blocks tokens and latency "
         "on small machines with two cores where memory bandwidth decides how fast every decode step can go").split()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("gguf")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-ctx", type=int, default=2048)
    args = parser.parse_args()
    from llama_cpp import Llama

    llm = Llama(args.gguf, n_ctx=args.n_ctx, n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    tpots, ttfts = [], []
    for r in range(args.repeats):
        words = [WORDS[(i * 7 + r * 13) % len(WORDS)] for i in range(4 * args.prompt_tokens)]
        prompt = llm.tokenize(" ".join(words).encode())[: args.prompt_tokens]
        llm.reset()
        start = time.perf_counter()
        times = []
        for _ in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            times.append(time.perf_counter())
            if len(times) == args.tokens:
                break
        ttfts.append((times[0] - start) * 1e3)
        tpots.append((times[-1] - times[0]) / (len(times) - 1) * 1e3)
        print(json.dumps({"repeat": r, "prompt_tokens": len(prompt), "ttft_ms": ttfts[-1], "tpot_ms": tpots[-1]}))
    print(json.dumps({"engine": "llama.cpp", "ttft_ms_median": statistics.median(ttfts),
                      "tpot_ms_median": statistics.median(tpots),
                      "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3}))


if __name__ == "__main__":
    main()
