"""Every architecture against transformers, from a Hugging Face folder and from a GGUF of the same weights.

Per architecture (tests/arch_cases.py): logits of a prompt within fp32 tolerance of transformers'; 32 greedy
tokens through the paged engine (prefix cache hit, chunked prefill, two sequences batched) equal to
transformers' greedy tokens, from the folder and from the GGUF; the GGUF (llama.cpp's names and Q/K row order,
tests/gguf_writer.py) gives the folder's logits.
"""
from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from arch_cases import CASE_NAMES, CASES, Case, hf_model, save_folder
from gguf_writer import write_gguf
from llmchat.core.api.params import SamplingParams
from llmchat.core.config import EngineConfig
from llmchat.core.hf_config import ARCHITECTURES
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.model.dense import DenseKV
from llmchat.core.model.loader import LoadedModel, load_model
from llmchat.core.weights.gguf_arch import ARCHES

pytest.importorskip("transformers")

PROMPT = [504, 3458, 282, 4649, 314, 7042, 30, 19842, 281, 816, 6330, 28, 5248, 2379, 288, 253, 1345, 30, 378, 9,
          1552, 11]  # 22 tokens: past every sliding window here, and past one KV block of 16
OTHER = PROMPT[:18] + [2114, 355, 7, 88]  # shares the first full block with PROMPT
NUM_TOKENS = 32
TOLERANCE = 1e-4  # fp32: both sides sum the same products in different orders


@dataclasses.dataclass(slots=True)
class Built:
    case: Case
    model: Any  # transformers'
    folder: Path
    gguf: Path
    loaded: dict[str, LoadedModel]  # "folder" / "gguf" -> ours
    greedy: dict[tuple[int, ...], list[int]]  # transformers' greedy tokens per prompt


@pytest.fixture(scope="module")
def built(tmp_path_factory, default_model_dir, default_gguf):
    """case name -> Built: made once per module on first use (the GGUF converted once, into the cache dir of the
    test that first asks)."""
    cache: dict[str, Built] = {}

    def get(name: str) -> Built:
        if name not in cache:
            case = next(c for c in CASES if c.name == name)
            model = hf_model(case)
            root = tmp_path_factory.mktemp(name)
            folder = save_folder(model, root / "folder", default_model_dir)
            gguf_path = write_gguf(model, case, root / f"{name}.gguf", default_gguf)
            loaded = {"folder": load_model(folder, weight_dtype="float32"),
                      "gguf": load_model(gguf_path, weight_dtype="float32")}
            cache[name] = Built(case, model, folder, gguf_path, loaded, {})
        return cache[name]

    return get


def our_logits(loaded, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        hidden = loaded.model(torch.tensor(ids), torch.arange(len(ids)), DenseKV(loaded.model, len(ids)))
        return loaded.model.compute_logits(hidden)


def hf_greedy(b: Built, ids: list[int], num_tokens: int = NUM_TOKENS) -> list[int]:
    """Greedy by full forwards (no cache): the plainest use of the reference (kept per case and prompt)."""
    if tuple(ids) not in b.greedy:
        out = list(ids)
        with torch.inference_mode():
            for _ in range(num_tokens):
                out.append(int(b.model(torch.tensor([out])).logits[0, -1].argmax()))
        b.greedy[tuple(ids)] = out[len(ids):]
    return b.greedy[tuple(ids)]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_folder_logits_match_transformers(built, name):
    b = built(name)
    loaded = b.loaded["folder"]
    assert loaded.config.architecture == type(b.model).__name__
    with torch.inference_mode():
        expected = b.model(torch.tensor([PROMPT])).logits[0]
    got = our_logits(loaded, PROMPT)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("name", CASE_NAMES)
def test_gguf_gives_the_folders_config_and_logits(built, name):
    b = built(name)
    from_folder, from_gguf = b.loaded["folder"], b.loaded["gguf"]
    assert from_gguf.config.architecture == ARCHES[b.case.gguf_arch].hf_architecture  # Mistral's GGUF says llama
    skip = {"architecture", "rope_scaling", "bos_token_id", "eos_token_ids"}  # RoPE: llama.cpp's factor tensors
    for field in dataclasses.fields(from_folder.config):
        if field.name not in skip:
            assert getattr(from_gguf.config, field.name) == getattr(from_folder.config, field.name), field.name
    diff = (our_logits(from_gguf, PROMPT) - our_logits(from_folder, PROMPT)).abs().max().item()
    assert diff <= TOLERANCE


def engine_greedy(loaded) -> tuple[list[int], list[int], int]:
    """PROMPT alone (it fills the prefix cache), then PROMPT and OTHER batched, prefill chunked by 8 tokens.
    Returns both token lists and how many of OTHER's prompt tokens came from the prefix cache."""
    block_bytes = loaded.config.kv_bytes_per_token(4) * 16
    engine = LLMEngine(loaded, EngineConfig(kv_cache_bytes=64 * block_bytes, max_num_batched_tokens=8,
                                            max_num_seqs=4))
    params = SamplingParams(temperature=0, max_tokens=NUM_TOKENS, ignore_eos=True)

    def run(prompts: list[list[int]]):
        ids = [engine.add_request(p, params) for p in prompts]
        done = {}
        while engine.has_work:
            for event in engine.step():
                if hasattr(event, "output_ids"):
                    done[event.request_id] = event
        return [done[i] for i in ids]

    first = run([PROMPT])[0]
    again, other = run([PROMPT, OTHER])
    assert again.output_ids == first.output_ids
    return list(first.output_ids), list(other.output_ids), other.metrics.num_cached_tokens


@pytest.mark.parametrize("source", ["folder", "gguf"])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_engine_greedy_matches_transformers(built, name, source):
    b = built(name)
    ours, ours_other, num_cached = engine_greedy(b.loaded[source])
    assert num_cached >= 16, "OTHER reuses PROMPT's first block"
    assert ours == hf_greedy(b, PROMPT)
    assert ours_other == hf_greedy(b, OTHER)


# One option of a case switched off: the logits must leave the tolerance, or the suite could not see it missed.
OPTIONS_OFF = [
    ("llama3.2", {"rope_scaling": None}),
    ("llama-linear", {"rope_scaling": None}),
    ("llama-yarn", {"rope_scaling": None}),
    ("mistral", {"layer_types": ("full_attention",) * 2, "sliding_window": None}),
    ("phi-4-mini", {"partial_rotary_factor": 1.0, "rope_scaling": None}),
    ("phi-4-mini", {"rope_scaling": None}),
    ("gemma2", {"attn_logit_softcapping": None}),
    ("gemma2", {"final_logit_softcapping": None}),
    ("gemma2", {"layer_types": ("full_attention",) * 2, "sliding_window": None}),
    ("gemma2", {"embedding_scale": 1.0}),
    ("gemma2", {"query_pre_attn_scalar": 64.0}),  # the case uses head_dim, as 2B and 9B do
    ("gemma3", {"rope_local_theta": None}),
    ("gemma3", {"rope_scaling": None}),
    ("smollm3", {"layer_types": ("full_attention",) * 4}),
    ("gemma4-e2b", {"value_norm": False}),
    ("gemma4-e2b", {"rope_scaling": None}),  # proportional RoPE of the full layers
    ("gemma4-e2b", {"rope_local_theta": None}),
    ("gemma4-e2b", {"final_logit_softcapping": None}),
    ("gemma4-e2b", {"query_pre_attn_scalar": None}),  # Gemma 4 scales scores by 1: its q/k norms do it
]
# Options that own weights: switched off with the state they own left out (names containing the word given).
WEIGHTS_OFF = [
    ("gemma4-e2b", {"per_layer_input_size": 0}, "per_layer"),
    ("gemma4-e2b", {"layer_scalar": False}, "layer_scalar"),
]
# Options that set tensor shapes: switched off, the checkpoint no longer fits the config and is refused.
SHAPES_OFF = [
    ("gemma4-e2b", {"num_kv_shared_layers": 0}),
    ("gemma4-e2b", {"global_head_dim": None}),
    ("gemma4-e2b", {"double_wide_mlp": False}),
]


@pytest.mark.parametrize("name,change,dropped", [(n, c, None) for n, c in OPTIONS_OFF] + WEIGHTS_OFF,
                         ids=[f"{n}-{'-'.join(c)}" for n, c, *_ in OPTIONS_OFF + WEIGHTS_OFF])
def test_each_option_changes_the_logits(built, name, change, dropped):
    from llmchat.core.model.loader import open_checkpoint
    from llmchat.core.model.model import build_model

    b = built(name)
    config, state = open_checkpoint(b.folder, "cpu")
    altered = dataclasses.replace(config, **change)
    if dropped is not None:
        state = {k: state[k] for k in state if dropped not in k}
    loaded = dataclasses.replace(b.loaded["folder"], config=altered, model=build_model(altered, state))
    with torch.inference_mode():
        expected = b.model(torch.tensor([PROMPT])).logits[0]
    assert (our_logits(loaded, PROMPT) - expected).abs().max().item() > 100 * TOLERANCE


@pytest.mark.parametrize("name,change", SHAPES_OFF, ids=[f"{n}-{'-'.join(c)}" for n, c in SHAPES_OFF])
def test_each_shape_option_decides_what_loads(built, name, change):
    from llmchat.core.model.loader import open_checkpoint
    from llmchat.core.weights.checkpoint import check_tensor_shapes
    from llmchat.core.weights.errors import ModelLoadError

    config, state = open_checkpoint(built(name).folder, "cpu")
    check_tensor_shapes(config, state.shapes(), "the folder")
    with pytest.raises(ModelLoadError, match="tensor"):
        check_tensor_shapes(dataclasses.replace(config, **change), state.shapes(), "the folder")


def test_kv_shared_layers_hold_no_kv_and_blocks_round_trip(built):
    """Gemma 4: the paged cache holds K/V only for the layers that store them (head sizes 16, 16, 32 here);
    a block's K/V across them reads out and writes back exactly (the disk tier's payload)."""
    from llmchat.core.engine.kv_cache import PagedKVCache

    config = built("gemma4-e2b").loaded["folder"].config
    assert [config.kv_source_of(i) for i in range(6)] == [0, 1, 2, 1, 1, 2]
    cache = PagedKVCache(config, 16, 4 * config.kv_bytes_per_token(4) * 16, torch.float32, "cpu")
    assert [None if k is None else k.shape[-1] for k in cache.k] == [16, 16, 32, None, None, None]
    assert cache.bytes_per_token == 2 * 1 * (16 + 16 + 32) * 4 and cache.num_blocks == 4
    for k, v in cache.stored:
        k.normal_()
        v.normal_()
    data = cache.read_blocks([1, 3])
    assert data.shape == (2, cache.bytes_per_block // 4)
    before = [t.clone() for pair in cache.stored for t in pair]
    cache.write_block(0, data[0])
    cache.write_block(2, data[1])
    for old, new in zip(before, [t for pair in cache.stored for t in pair]):
        assert torch.equal(new[0], old[1]) and torch.equal(new[2], old[3])


ASK_TOKENS = 12


@pytest.mark.parametrize("name", CASE_NAMES)
def test_ask_on_a_gguf_of_each_architecture(built, name):
    """`llmchat ask --model F.gguf --temperature 0` says what it loaded and replies transformers' greedy text
    (gibberish, as the weights are random) up to the first end-of-turn id."""
    from serve_helpers import llmchat_exe

    from llmchat.core.text.prompt import chat_messages, prompt_ids_for

    b = built(name)
    tokenizer = b.loaded["gguf"].tokenizer
    question = "What is the capital of France?"
    ids = hf_greedy(b, prompt_ids_for(tokenizer, chat_messages(question, None)), ASK_TOKENS)
    ends = [i for i, t in enumerate(ids) if t in tokenizer.stop_token_ids]
    expected = tokenizer.decode(ids[: ends[0]] if ends else ids, skip_special_tokens=True)
    done = subprocess.run([llmchat_exe(), "ask", "--model", str(b.gguf), "--temperature", "0", "--max-tokens",
                           str(ASK_TOKENS), "--raw", "--stats", question], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected + "\n"
    model_type = ARCHITECTURES[ARCHES[b.case.gguf_arch].hf_architecture]  # the facts line names it
    assert f" · {model_type} · " in next(line for line in done.stderr.splitlines() if line.startswith("model "))


def test_every_declared_end_id_stops_a_reply(built, tmp_path):
    """An id the model declares as an end (config.json or generation_config.json) but the vocabulary's
    end-of-turn list does not name ends the reply there."""
    import json
    import shutil

    b = built("mistral")  # untied: a varied reply
    reply = engine_greedy(b.loaded["folder"])[0]
    k = next(k for k in range(1, len(reply)) if reply[k] not in reply[:k])  # a token first seen at step k >= 1
    end = reply[k]
    for config_file in ("config.json", "generation_config.json"):
        folder = shutil.copytree(b.folder, tmp_path / config_file)
        data = json.loads((folder / config_file).read_text()) if (folder / config_file).exists() else {}
        (folder / config_file).write_text(json.dumps(data | {"eos_token_id": [2, end]}))
        loaded = load_model(folder, weight_dtype="float32")
        assert end in loaded.tokenizer.stop_token_ids
        engine = LLMEngine(loaded, EngineConfig(kv_cache_bytes=64 * loaded.config.kv_bytes_per_token(4) * 16))
        engine.add_request(PROMPT, SamplingParams(temperature=0, max_tokens=NUM_TOKENS))
        finished = [e for _ in iter(lambda: engine.has_work, False) for e in engine.step() if hasattr(e, "output_ids")]
        assert list(finished[0].output_ids) == reply[: k + 1]
