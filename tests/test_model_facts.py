"""What was loaded, counted from the loaded model (core/model/model_facts.py): the parameter count is the sum of
the element counts of the tensors the file holds (a tied embedding once), the weight types are the block types
or dtypes actually loaded with their share; `ask --stats` prints the line; an unsupported architecture is one
line naming the supported ones, exit code 2; a remote backend's facts say only what the server does."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from llmchat.core.api.model_facts import ModelFacts, params_text
from llmchat.core.config import ModelConfig
from llmchat.core.hf_config import SUPPORTED_ARCHITECTURES
from llmchat.core.model.loader import LoadedModel, load_model
from llmchat.core.model.model import build_model
from llmchat.core.model.model_facts import model_facts, shown_name
from llmchat.core.model.quant_load import build_quantized_model
from llmchat.core.weights.checkpoint import expected_tensor_shapes
from llmchat.kernels.quant_cpu_build import load_cpu_kernels
from serve_helpers import TINY_CONFIG, write_tiny_model
from test_quant_load import CFG, stored_tensors


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_default_model_facts_count_the_gguf_tensors(default_gguf):
    import gguf

    loaded = load_model(str(default_gguf), "cpu", "float32", None, "auto")
    facts = model_facts(loaded)
    in_file = gguf.GGUFReader(default_gguf).tensors
    assert facts.num_params == sum(int(t.n_elements) for t in in_file) == 134_515_008  # tied: no output.weight
    assert facts.weight_types == (("Q4_1", 1.0),) and facts.embedding_type == "Q8_0" and facts.output_type is None
    assert (facts.architecture, facts.num_layers, facts.hidden_size, facts.context_length) == ("llama", 30, 576, 8192)
    assert facts.line() == "SmolLM2-135M-Instruct · llama · 135M params · Q4_1 (+Q8_0 embedding) · ctx 8192"


def test_mixed_block_types_are_shared_by_elements(tmp_path):
    kernels = load_cpu_kernels(str(tmp_path / "kernels"))
    cfg = dataclasses.replace(CFG, tie_word_embeddings=False)
    tensors = stored_tensors(cfg, "Q6_K", seed=0)
    model = build_quantized_model(cfg, tensors, torch.float32, kernels.module)
    facts = model_facts(LoadedModel(tmp_path / "mixed-Q4_K.gguf", cfg, model, None, 0.0))
    assert facts.num_params == sum(t.shape[0] * (t.shape[1] if len(t.shape) > 1 else 1) for t in tensors)
    want: dict[str, int] = {}
    for t in tensors:  # layer 1's q is F16: its whole fused q/k/v is loaded as fp32 (tests/test_quant_load.py)
        if ".layers." in t.name and len(t.shape) == 2:
            fused_fp32 = ".1.self_attn." in t.name and t.name.split(".")[-2] in ("q_proj", "k_proj", "v_proj")
            kind = "float32" if fused_fp32 else t.kind
            want[kind] = want.get(kind, 0) + t.shape[0] * t.shape[1]
    total = sum(want.values())
    assert dict(facts.weight_types) == pytest.approx({k: n / total for k, n in want.items()})
    assert [s for _, s in facts.weight_types] == sorted((s for _, s in facts.weight_types), reverse=True)
    assert (facts.embedding_type, facts.output_type, facts.name) == ("Q8_0", "Q6_K", "mixed")
    assert "(+Q8_0 embedding, +Q6_K output)" in facts.line() and "float32 " in facts.line()


@pytest.mark.parametrize("tied", [True, False])
def test_a_dense_model_counts_a_tied_embedding_once_packed_or_not(tmp_path, tied):
    cfg = ModelConfig.from_hf_dict({**TINY_CONFIG, "vocab_size": 300, "tie_word_embeddings": tied})
    torch.manual_seed(0)
    model = build_model(cfg, None)
    shapes = expected_tensor_shapes(cfg)  # what a checkpoint of this config holds
    want = sum(torch.Size(s).numel() for s in shapes.values())
    loaded = LoadedModel(tmp_path / "tiny", cfg, model, None, 0.0)
    before = model_facts(loaded)
    model.prepack()  # projections' plain weights dropped for the packed copies; the tied head packs a copy
    after = model_facts(loaded)
    assert before.num_params == after.num_params == want
    assert before.weight_types == after.weight_types == (("float32", 1.0),)
    assert after.line() == f"tiny · llama · {params_text(want)} · float32 · ctx 1024"


def test_facts_leave_out_what_is_not_known():
    assert ModelFacts("served-model", context_length=4096).line() == "served-model · ctx 4096"
    assert ModelFacts("served-model").line() == "served-model"
    assert params_text(1_235_814_400) == "1.2B params" and params_text(6_500_000) == "6.5M params"
    assert shown_name("Llama-3.2-1B-Instruct-Q4_K_M.gguf", {"Q4_K"}) == "Llama-3.2-1B-Instruct-Q4_K_M"  # not Q4_K


def test_ask_stats_prints_the_facts_line(tmp_path, default_model_dir):
    folder = write_tiny_model(tmp_path / "tiny-llama", default_model_dir)
    done = run_cli("ask", "--model", str(folder), "--temperature", "0", "--max-tokens", "2", "--stats", "Hi")
    assert done.returncode == 0, done.stderr
    cfg = ModelConfig.from_hf_dict(json.loads((folder / "config.json").read_text()))
    num_params = sum(torch.Size(s).numel() for s in expected_tensor_shapes(cfg).values())
    line = f"model tiny-llama · llama · {params_text(num_params)} · float32 · ctx 1024 (2 layers: "  # untied head:
    assert any(got.startswith(line) for got in done.stderr.splitlines()), done.stderr  # float32 as the layers


def test_an_unsupported_architecture_is_one_line_naming_the_supported_ones(tmp_path, default_model_dir):
    folder = write_tiny_model(tmp_path / "odd", default_model_dir)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["MambaForCausalLM"]}))
    done = run_cli("ask", "--model", str(folder), "--max-tokens", "2", "Hi")
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "MambaForCausalLM" in lines[0], done.stderr
    assert all(arch in lines[0] for arch in SUPPORTED_ARCHITECTURES)
