"""The accuracy gate for the bf16 weight format (fp32 activations) against the fp32 reference format.

A format that is not bit-compatible with fp32 may be a default only if, on the real model: the NLL of a
fixed ~2,000-token text (tests/data/gate_text.txt: the first part of CPython's LICENSE.txt) is within 1% of
fp32's, and at least 9 of 10 fixed prompts get the same greedy reply (24 tokens).

Measured (AMX Xeon): bf16 NLL 2.1072 vs fp32 2.1041 (+0.15%), but 4 of 10 greedy replies identical. So bf16
is opt-in (`--weights bfloat16`) and `auto` stays fp32; the test below holds bf16 to the NLL half of the gate
(what keeps it usable as an option) and `auto` to the reference. `python -c` on gate_figures() prints both.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from llmchat.core.model.dense import DenseKV, generate_dense
from llmchat.core.model.loader import load_model
from llmchat.core.api.params import SamplingParams
from llmchat.kernels.linear import cpu_has_native_bf16

GATE_TEXT = Path(__file__).parent / "data" / "gate_text.txt"
GATE_PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that reverses a string.",
    "Give me three tips for sleeping better.",
    "Explain what a hash table is to a beginner.",
    "What is 17 times 23?",
    "Write a haiku about autumn leaves.",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "What are the primary colors?",
    "How do I make a cup of tea?",
    "Name a few planets in the solar system.",
]
REPLY_TOKENS = 24


@torch.inference_mode()
def text_nll(loaded, ids: list[int], rows_per_chunk: int = 256) -> float:
    """Mean negative log-likelihood (nats/token) of ids[1:] given the prefix, one forward over the text."""
    model = loaded.model
    hidden = model(torch.tensor(ids), torch.arange(len(ids)), DenseKV(model, len(ids)))
    targets = torch.tensor(ids[1:])
    total = 0.0
    for start in range(0, len(ids) - 1, rows_per_chunk):
        logits = model.compute_logits(hidden[start : min(start + rows_per_chunk, len(ids) - 1)])
        total += torch.nn.functional.cross_entropy(
            logits, targets[start : start + logits.shape[0]], reduction="sum").item()
    return total / (len(ids) - 1)


def greedy_replies(loaded) -> list[tuple[int, ...]]:
    params = SamplingParams(temperature=0, max_tokens=REPLY_TOKENS, ignore_eos=True)
    return [tuple(generate_dense(loaded.model, loaded.tokenizer.encode_chat([{"role": "user", "content": p}]), params))
            for p in GATE_PROMPTS]


def gate_figures(reference, candidate) -> dict:
    ids = reference.tokenizer.encode(GATE_TEXT.read_text())
    nll_ref, nll_new = text_nll(reference, ids), text_nll(candidate, ids)
    same = sum(a == b for a, b in zip(greedy_replies(reference), greedy_replies(candidate)))
    return {"num_tokens": len(ids), "nll_fp32": nll_ref, "nll_candidate": nll_new,
            "nll_rel_change": (nll_new - nll_ref) / nll_ref, "same_greedy_replies": same}


@pytest.mark.slow
def test_bf16_weights_keep_the_gate_text_nll_within_one_percent(default_model_dir):
    if not cpu_has_native_bf16():
        pytest.skip("the packed bf16 path needs a CPU with AMX / AVX-512 BF16")
    reference = load_model(default_model_dir, weight_dtype="float32")
    candidate = load_model(default_model_dir, weight_dtype="bfloat16")
    assert candidate.model.layers[0].mlp.down_proj.packed is not None  # the fast path is what is measured
    assert candidate.model.layers[0].mlp.down_proj.weight is None  # and it keeps one weight copy
    ids = reference.tokenizer.encode(GATE_TEXT.read_text())
    assert 1900 <= len(ids) <= 2100
    nll_ref, nll_new = text_nll(reference, ids), text_nll(candidate, ids)
    assert abs(nll_new - nll_ref) <= 0.01 * nll_ref, (nll_ref, nll_new)


def test_auto_weight_format_is_the_reference_until_a_format_passes_the_gate():
    from llmchat.core.model.loader import resolve_weight_dtype

    assert resolve_weight_dtype("auto", "cpu", "float32") == "float32"
    assert resolve_weight_dtype("bfloat16", "cpu", "float32") == "bfloat16"
    assert resolve_weight_dtype("float32", "cpu", "float32") == "float32"
    assert resolve_weight_dtype(None, "cuda", "bfloat16") == "bfloat16"
    with pytest.raises(ValueError, match="weight format"):
        resolve_weight_dtype("int3", "cpu", "float32")
