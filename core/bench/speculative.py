"""`llmchat bench speculative`: TPOT with speculative decoding on and off, on workloads where drafts exist
(the model is asked to repeat or lightly edit a ~300-token text or piece of code it was given: prompt lookup
finds it) and on a plain chat turn (drafts rarely match: adaptive k must keep it from costing).

Variant pairs (prefix + `on`/`off`), each run on a fresh engine, interleaved (who runs first alternates), so a
machine shared with other work slows all of them alike; the table gives medians:
- `on`/`off`: repeat a ~300-token prose text exactly;
- `code-on`/`code-off`: repeat ~300 tokens of Python exactly (the default 135M model rewrites code as it goes,
  so this is its hardest case);
- `edit-on`/`edit-off`: rename a function in that code and show the whole code;
- `plain-on`/`plain-off`: a plain chat question.
Metrics: `tpot` (ms), and on the `on` variants `acceptance` (kept / drafted), `tokens_per_forward` and
`identical` (1 when every `on` run gave the same greedy tokens as the `off` run beside it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..api.metrics import median
from ..text.prompt import prompt_ids_for
from ..api.params import SamplingParams

if TYPE_CHECKING:
    from .bench import Bench

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
PROSE_TEXT = """The lighthouse stood at the end of the northern pier for more than a century. Its keeper, a quiet \
man named Elias Brandt, climbed the one hundred and twelve steps every evening at dusk to light the great lamp. He \
cleaned the lens each morning with a soft cloth and a bowl of warm water, and he wrote the weather in a leather \
logbook: the wind, the height of the waves, the ships that passed. In winter the storms came from the west and the \
spray reached the gallery rail. In summer the fishing boats left before dawn and came back heavy in the afternoon.

When the harbour board replaced the lamp with an automatic light, Elias stayed on for another year, walking the pier \
each evening out of habit, watching the beam turn without him. He mended nets for the fishermen, taught the \
children of the harbour master to read the tide tables, and kept a small garden of herbs behind the storehouse. The \
logbooks are kept today in the town museum, forty-one volumes in the same careful hand, and visitors still ask to \
see the page for the night of the great storm, when the lamp burned until morning and every boat came home."""
REPEAT_REQUEST = "Repeat the following text exactly, without any change:\n\n" + PROSE_TEXT
CODE_REQUEST = "Repeat the following code exactly, without any change:\n\n" + REPEAT_TEXT
EDIT_REQUEST = "Rename the function count_words to word_counts in this code and show the whole code:\n\n" + REPEAT_TEXT
PLAIN_REQUEST = "Tell me about the history of tea."


def run_speculative(bench: "Bench") -> None:
    from .bench import run_all  # here: core/bench imports this module

    tokenizer = bench.loaded.tokenizer

    def ids_of(request: str) -> list[int]:
        return prompt_ids_for(tokenizer, [{"role": "user", "content": request}])

    long = SamplingParams(temperature=0, max_tokens=4 * bench.size.decode_tokens)
    workloads = {  # variant prefix -> (prompt, greedy params)
        "": (ids_of(REPEAT_REQUEST), long),
        "code-": (ids_of(CODE_REQUEST), long),
        "edit-": (ids_of(EDIT_REQUEST), long),
        "plain-": (ids_of(PLAIN_REQUEST), SamplingParams(temperature=0, max_tokens=2 * bench.size.decode_tokens)),
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
        bench.log(f"speculative {prefix}on / {prefix}off TPOT: {ratio:.2f}x")
