"""core/model/sampling.py: SamplingParams is validated when made; sample() never hands torch.multinomial a NaN or inf."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmchat.core.api.params import MAX_TOKENS_LIMIT, SamplingParams
from llmchat.core.model.sampling import filtered_probs, make_generator, sample

BAD_PARAMS = [
    ({"temperature": float("nan")}, "temperature must be a finite number"),
    ({"temperature": float("inf")}, "temperature must be a finite number"),
    ({"temperature": -0.1}, "temperature must be >= 0"),
    ({"temperature": "0.7"}, "temperature must be a finite number"),
    ({"top_p": 0.0}, "top_p must be in (0, 1]"),
    ({"top_p": 1.5}, "top_p must be in (0, 1]"),
    ({"top_p": float("nan")}, "top_p must be a finite number"),
    ({"top_k": -1}, "top_k must be a whole number from 0"),
    ({"top_k": 2.5}, "top_k must be a whole number from 0"),
    ({"max_tokens": 0}, "max_tokens must be a whole number from 1"),
    ({"max_tokens": 10**30}, f"to {MAX_TOKENS_LIMIT}"),
    ({"max_tokens": True}, "max_tokens must be a whole number"),
    ({"seed": -1}, "seed must be a whole number from 0"),
    ({"seed": 1.5}, "seed must be a whole number"),
    ({"seed": 2**64}, "seed must be a whole number"),
    ({"stop": ("",)}, "stop must be a list of non-empty strings"),
    ({"stop": (3,)}, "stop must be a list of non-empty strings"),
]


@pytest.mark.parametrize("kwargs, needle", BAD_PARAMS)
def test_bad_params_raise_one_clear_line(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        SamplingParams(**kwargs)
    message = str(excinfo.value)
    assert needle in message and "\n" not in message and "got" in message


def test_good_params_are_kept_and_normalised() -> None:
    p = SamplingParams(temperature=1, top_p=1, top_k=40, max_tokens=MAX_TOKENS_LIMIT, seed=2**64 - 1, stop="END")
    assert (p.temperature, p.top_p, p.stop) == (1.0, 1.0, ("END",)) and isinstance(p.temperature, float)
    assert SamplingParams(temperature=0).greedy and not SamplingParams(temperature=0.01).greedy


@pytest.mark.parametrize("temperature", [1e-45, 1e-30, 1e-6, 1e-50, 5e-324])
def test_tiny_temperatures_are_greedy_and_never_raise(temperature: float) -> None:
    logits = torch.tensor([[0.5, 3.0, -2.0, 2.999]])
    p = SamplingParams(temperature=temperature)
    assert p.greedy
    assert sample(logits, [p], [make_generator(p)]) == [1]


@pytest.mark.parametrize("temperature", [1e-5, 1e-4])
def test_small_temperatures_give_finite_probabilities(temperature: float) -> None:
    logits = torch.tensor([0.5, 3.0, -2.0, 2.9999, 1e30, -1e30]) * torch.tensor([1, 1, 1, 1, 0, 1])
    probs = filtered_probs(logits, SamplingParams(temperature=temperature))
    assert torch.isfinite(probs).all() and math.isclose(probs.sum().item(), 1.0, rel_tol=1e-5)
    assert probs.argmax().item() == 1


finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                          st.sampled_from([3e38, -3e38, 1e-38]))


@settings(max_examples=150, deadline=None)
@given(values=st.lists(finite_or_not, min_size=2, max_size=12),
       temperature=st.one_of(st.floats(1e-5, 100.0), st.sampled_from([1e-5, 2.0, 1e4])),
       top_p=st.floats(1e-6, 1.0), top_k=st.integers(0, 20), seed=st.integers(0, 2**63))
def test_multinomial_never_sees_nan_or_inf(values, temperature, top_p, top_k, seed) -> None:
    logits = torch.tensor(values, dtype=torch.float32)
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    if not torch.nan_to_num(logits, nan=-math.inf, posinf=1.0).isfinite().any():
        with pytest.raises(ValueError, match="no finite logits"):
            filtered_probs(logits, params)
        return
    probs = filtered_probs(logits, params)
    assert torch.isfinite(probs).all() and (probs >= 0).all()
    assert math.isclose(probs.sum().item(), 1.0, rel_tol=1e-4)
    assert not (probs[torch.isnan(logits)] > 0).any()  # a NaN logit is never chosen
    (token,) = sample(logits[None], [params], [make_generator(params)])
    assert probs[token] > 0


def test_cli_temperature_nan_is_one_line_exit_2_before_loading(tmp_path) -> None:
    env_cache = {"LLMCHAT_CACHE_DIR": str(tmp_path / "cache")}
    for flag, value, needle in [("--temperature", "nan", "temperature must be a finite number"),
                                ("--temperature", "1e-45", None),  # valid: greedy (would load the model)
                                ("--top-p", "0", "top_p must be in (0, 1]"),
                                ("--max-tokens", str(10**30), "max_tokens must be a whole number"),
                                ("--seed", "-5", "seed must be a whole number")]:
        if needle is None:
            SamplingParams(temperature=float(value))
            continue
        result = subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", "ask", "hi", flag, value, "--model",
                                 str(tmp_path / "never-read.gguf")],
                                capture_output=True, text=True, timeout=120, env={**os.environ, **env_cache})
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("llmchat: ") and needle in lines[0], result.stderr
        assert not (tmp_path / "cache").exists()  # refused before any model was looked at
