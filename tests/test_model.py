"""The forward pass against an independent implementation: transformers' LlamaForCausalLM on the same GGUF."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from llmchat.core.model.dense import DenseKV, generate_dense
from llmchat.core.model.loader import load_model
from llmchat.core.api.params import SamplingParams

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that reverses a string.",
    "Translate to French: the cat sleeps on the warm windowsill. 🐈",
    "List three prime numbers greater than 100 and explain why they are prime.",
]


@pytest.fixture(scope="module")
def ours(default_model_dir):
    return load_model(default_model_dir, weight_dtype="float32")  # the reference format, for exactness


@pytest.fixture(scope="module")
def reference(default_gguf):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(default_gguf.parent), gguf_file=default_gguf.name, dtype=torch.float32, local_files_only=True
    )
    return model.eval()


def prompt_ids(loaded, question: str) -> list[int]:
    return loaded.tokenizer.encode_chat([{"role": "user", "content": question}])


@pytest.mark.slow
@pytest.mark.parametrize("question", PROMPTS)
def test_logits_match_transformers(ours, reference, question):
    ids = prompt_ids(ours, question)
    with torch.inference_mode():
        expected = reference(torch.tensor([ids])).logits[0]
        hidden = ours.model(torch.tensor(ids), torch.arange(len(ids)), DenseKV(ours.model, len(ids)))
        got = ours.model.compute_logits(hidden)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= 1e-3


LONG_ANSWERS = ["Write a Python function that reverses a string.", "Tell me a story about a lighthouse keeper."]


@pytest.mark.slow
@pytest.mark.parametrize("question", LONG_ANSWERS)
def test_greedy_tokens_match_transformers(ours, reference, question):
    ids = prompt_ids(ours, question)
    stop_ids = ours.tokenizer.stop_token_ids
    got = list(generate_dense(ours.model, ids, SamplingParams(temperature=0, max_tokens=48), stop_ids))
    with torch.inference_mode():
        out = reference.generate(
            torch.tensor([ids]), max_new_tokens=48, do_sample=False, eos_token_id=sorted(stop_ids),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long), pad_token_id=0,
        )
    assert len(got) == 48  # long answers: every one of the 48 greedy tokens is compared
    assert got == out[0, len(ids) :].tolist()


@pytest.mark.slow
def test_ask_answers_the_capital_of_france(default_model_dir):
    result = subprocess.run(
        [sys.executable, "-m", "llmchat.tui.commands.cli", "ask", "What is the capital of France? Answer in one sentence.",
         "--temperature", "0", "--stats"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The capital of France is Paris."
    assert "TTFT" in result.stderr and "TPOT" in result.stderr


def test_ask_bad_model_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 10)
    result = subprocess.run(
        [sys.executable, "-m", "llmchat.tui.commands.cli", "ask", "hi", "--model", str(bad)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "LLMCHAT_CACHE_DIR": str(tmp_path / "c")},
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("llmchat:")]
    assert len(errors) == 1 and "broken.gguf" in errors[0] and "not a valid GGUF" in errors[0]
    assert "Traceback" not in result.stderr
    assert not any((tmp_path / "c").rglob("*.safetensors"))


def test_ask_on_a_missing_gpu_is_one_line_exit_2():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", "ask", "hi", "--device", "cuda"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "no CUDA GPU" in result.stderr and "Traceback" not in result.stderr


def test_ask_empty_question_is_refused():
    result = subprocess.run(
        [sys.executable, "-m", "llmchat.tui.commands.cli", "ask", "   "], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and "empty" in result.stderr


def test_version_and_help():
    out = subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("llmchat ")
    out = subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "ask" in out.stdout and "pull" in out.stdout
