"""The engine on its Triton kernels gives what the torch path on the CPU gives: on a GPU when there is one (checked on an
H200: logits within 2e-5, same greedy ids), else under TRITON_INTERPRET=1 on the CPU."""
from __future__ import annotations

import pytest
import torch

from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.api.events import Finished
from llmchat.core.api.params import SamplingParams
from llmchat.core.model.loader import load_model
from llmchat.kernels.triton_support import HAS_TRITON

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # Triton runs CPU tensors only when interpreting


def logits_of_steps(loaded, backend: str, prompts: list[list[int]], num_decode_steps: int) -> list[torch.Tensor]:
    """Run one engine by hand and capture the logits the runner samples from at every step."""
    device = str(loaded.model.device)
    engine = LLMEngine(loaded, EngineConfig(device=device, kernel_backend=backend, max_num_batched_tokens=24))
    captured: list[torch.Tensor] = []
    model = engine.runner.model
    original = model.compute_logits

    def capture(hidden):
        logits = original(hidden)
        captured.append(logits.float().cpu())
        return logits

    model.compute_logits = capture
    try:
        params = SamplingParams(temperature=0, max_tokens=num_decode_steps, ignore_eos=True)
        for p in prompts:
            engine.add_request(p, params)
        finished = []
        while engine.has_work:
            finished += [e for e in engine.step() if isinstance(e, Finished)]
    finally:
        del model.compute_logits
    assert len(finished) == len(prompts)
    return captured


def test_triton_backend_matches_torch_backend(tiny_model_dir, monkeypatch):
    reference = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    tok = reference.tokenizer
    prompts = [tok.encode("The quick brown fox jumps over the lazy dog " * n) for n in (1, 3, 5)]
    ref = logits_of_steps(reference, "torch", prompts, 4)
    monkeypatch.setenv("LLMCHAT_KERNEL_BACKEND", "triton")  # RMSNorm and RoPE too, not only the attention ops
    got = logits_of_steps(load_model(str(tiny_model_dir), device=TRITON_DEVICE, dtype="float32"), "triton", prompts, 4)
    assert len(ref) == len(got) > 0
    for a, b in zip(ref, got):  # chunked prefill steps, mixed steps and pure decode steps
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
        assert torch.equal(a.argmax(-1), b.argmax(-1))
