"""`llmchat bench speculative`: TPOT with speculative decoding on and off, on a workload where drafts
exist (the model is asked to repeat a ~300-token piece of code it was given: prompt lookup finds it) and on
a plain chat turn (drafts rarely match: adaptive k must keep it from costing).

Variants `on`/`off` (repeat) and `plain-on`/`plain-off` (plain turn) run interleaved, each run on a fresh
engine, so a machine shared with other work slows all of them alike; the table gives medians. Metrics:
`tpot` (ms), and on the `on` variants `acceptance` (kept / drafted), `tokens_per_forward` and `identical`
(1 when every `on` run gave the same greedy tokens as the `off` run beside it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmchat.core.metrics import median
from llmchat.core.prompt import prompt_ids_for
from llmchat.core.sampling import SamplingParams

if TYPE_CHECKING:
    from llmchat.core.bench import Bench

REPEAT_TEXT = '''def merge_intervals(intervals):
    """Merge overlapping intervals and return them sorted by start."""
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda pair: pair[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]


def count_words(text):
    """Count how often each word occurs in a text, ignoring case."""
    counts = {}
    for word in text.lower().split():
        word = word.strip(".,;:!?\\"'()")
        if word:
            counts[word] = counts.get(word, 0) + 1
    return counts


def moving_average(values, window):
    """Return the averages of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = sum(values[:window])
    averages.append(total / window)
    for i in range(window, len(values)):
        total += values[i] - values[i - window]
        averages.append(total / window)
    return averages
'''
REPEAT_REQUEST = "Repeat the following code exactly, without any change:\n\n" + REPEAT_TEXT
PLAIN_REQUEST = "Tell me about the history of tea."


def run_speculative(bench: "Bench") -> None:
    from llmchat.core.bench import run_all  # here: core/bench imports this module

    tokenizer = bench.loaded.tokenizer
    workloads = {  # variant prefix -> (prompt, greedy params)
        "": (prompt_ids_for(tokenizer, [{"role": "user", "content": REPEAT_REQUEST}]),
             SamplingParams(temperature=0, max_tokens=4 * bench.size.decode_tokens)),
        "plain-": (prompt_ids_for(tokenizer, [{"role": "user", "content": PLAIN_REQUEST}]),
                   SamplingParams(temperature=0, max_tokens=2 * bench.size.decode_tokens)),
    }
    spec_tokens = bench.spec_tokens
    tpot: dict[str, list[float]] = {}
    acceptance: dict[str, list[float]] = {}
    per_forward: dict[str, list[float]] = {}
    identical: dict[str, bool] = {}
    for repeat in range(bench.size.repeats):
        for prefix, (prompt, params) in workloads.items():
            order = (("on", spec_tokens), ("off", 0))
            outputs = {}
            for state, num in order if repeat % 2 == 0 else order[::-1]:  # alternate who runs first
                (result,), _ = run_all(bench.engine(num_speculative_tokens=num), [(prompt, params)])
                m = result.metrics
                variant = prefix + state
                tpot.setdefault(variant, []).append(m.tpot * 1e3)
                if num:
                    acceptance.setdefault(variant, []).append(m.acceptance_rate)
                    per_forward.setdefault(variant, []).append(m.tokens_per_forward)
                outputs[state] = result.output_ids
            identical[prefix + "on"] = identical.get(prefix + "on", True) and outputs["on"] == outputs["off"]
    for variant, values in tpot.items():
        bench.results.add("speculative", variant, "tpot", values, "ms")
        if variant in acceptance:
            rates = [r for r in acceptance[variant] if r == r]  # NaN: nothing drafted in that run
            bench.results.add("speculative", variant, "acceptance", rates or [0.0], "ratio")
            bench.results.add("speculative", variant, "tokens_per_forward", per_forward[variant], "tokens")
            bench.results.add("speculative", variant, "identical", [float(identical[variant])], "bool")
    for prefix in workloads:
        ratio = median(tpot[prefix + "on"]) / median(tpot[prefix + "off"])
        bench.log(f"speculative {prefix or 'repeat-'}on / {prefix or 'repeat-'}off TPOT: {ratio:.2f}x")
