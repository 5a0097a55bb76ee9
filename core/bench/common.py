"""What the bench scenarios share: filler prompts of a given length, running requests to the end, a chat turn,
the results table, the CPU's description."""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field

from ..api.events import Finished
from ..api.params import SamplingParams
from ..chats.conversation import Conversation
from ..engine.engine import LLMEngine
from ..model.loader import LoadedModel
from ..text.prompt import prompt_ids_for

WORDS = (
    "the quick brown fox jumps over a lazy dog while engineers measure caches blocks tokens and latency "
    "on small machines with two cores where memory bandwidth decides how fast every decode step can go"
).split()


@dataclass(slots=True)
class Results:
    rows: list[dict] = field(default_factory=list)

    def add(self, scenario: str, variant: str, metric: str, values: list[float], unit: str, turn: int | None = None):
        row = {"scenario": scenario, "variant": variant, "metric": metric, "value": statistics.median(values),
               "unit": unit}
        if turn is not None:
            row["turn"] = turn
        self.rows.append(row)

    def table(self) -> str:
        lines = [f"{'scenario':<11} {'variant':<14} {'metric':<24} {'turn':>4} {'median':>10}  unit"]
        for r in self.rows:
            turn = "" if r.get("turn") is None else str(r["turn"])
            lines.append(f"{r['scenario']:<11} {r['variant']:<14} {r['metric']:<24} {turn:>4} {r['value']:>10.2f}  "
                         f"{r['unit']}")
        return "\n".join(lines)

    def write_json(self, path: str) -> None:
        with open(path, "w") as f:
            for r in self.rows:
                f.write(json.dumps(r) + "\n")


def cpu_description() -> str:
    """The CPU model and the flags that decide the fast paths (from /proc/cpuinfo; 'unknown' elsewhere)."""
    try:
        info = open("/proc/cpuinfo").read().splitlines()
    except OSError:
        return "unknown"
    model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), []))
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
    return f"{model} [{' '.join(f for f in wanted if f in flags) or 'no avx2'}]"


def filler_text(num_tokens: int, salt: int) -> str:
    """Plain English-ish text of roughly num_tokens tokens; salt makes prompts differ from the first word."""
    words = [WORDS[(salt * 7 + i * 13) % len(WORDS)] for i in range(num_tokens)]
    return f"[{salt}] " + " ".join(words)


def prompt_of_length(loaded: LoadedModel, num_tokens: int, salt: int) -> list[int]:
    """A chat prompt trimmed to exactly num_tokens ids (unique per salt, so nothing is reused by accident)."""
    ids = prompt_ids_for(loaded.tokenizer, [{"role": "user", "content": filler_text(num_tokens, salt)}])
    return ids[:num_tokens]


def run_all(engine: LLMEngine, requests: list[tuple[list[int], SamplingParams]]) -> tuple[list[Finished], float]:
    start = time.perf_counter()
    ids = [engine.add_request(p, params) for p, params in requests]
    done = {e.request_id: e for e in engine.run_until_done() if isinstance(e, Finished)}
    return [done[i] for i in ids], time.perf_counter() - start


def fixed(num_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=num_tokens, ignore_eos=True)


def chat_turn(engine: LLMEngine, chat: Conversation, text: str, num_tokens: int) -> Finished:
    """One turn of a chat: its prompt extends the chat's ids, and the chat keeps what the model said."""
    user, reply = chat.start_turn(text)
    prompt = prompt_ids_for(engine.tokenizer, chat.template_messages(), chat.token_ids)
    (result,), _ = run_all(engine, [(prompt, fixed(num_tokens))])
    chat.begin_reply(user, reply, prompt)
    chat.finish_reply(reply, result.text, "done", result.reason.value, output_ids=list(result.output_ids))
    return result
