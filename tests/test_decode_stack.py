"""The C++ decode stack (core/model/decode_stack.py, kernels/csrc/decode_stack.cpp) against the model's Python
forward on the same C++ kernels: one decode step of ragged sequences over a paged cache gives the same bits
(hidden states and every layer's cache), for each layer option it takes: q/k/v biases, q/k norms, partial
RoPE, layers without RoPE, sliding windows, fused projections of two block types. Then the engine on the
default model: greedy replies with the stack equal those without it, and models it cannot take keep Python."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from llmchat.core.config import NO_ROPE_ATTENTION, SLIDING_ATTENTION, FULL_ATTENTION, ModelConfig
from llmchat.core.engine.attention import AttentionMetadata, PagedKV
from llmchat.core.engine.kv_cache import PagedKVCache
from llmchat.core.model.decode_stack import build_decode_stack, supported
from llmchat.core.model.quant_load import build_quantized_model
from llmchat.core.weights.tensor_source import StoredTensor
from llmchat.kernels.quant_cpu_build import load_cpu_kernels
from quant_testing import random_blocks

BASE = ModelConfig(
    architecture="LlamaForCausalLM", vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5, rope_theta=10000.0,
    max_position_embeddings=512, tie_word_embeddings=True,
)
OPTIONS = {
    "llama": {},
    "qwen2-biases": {"attention_bias": True},
    "qwen3-qk-norm": {"qk_norm": True},
    "phi-partial-rope": {"partial_rotary_factor": 0.5},
    "smollm3-no-rope": {"layer_types": (FULL_ATTENTION, NO_ROPE_ATTENTION, FULL_ATTENTION)},
    "mistral-window": {"layer_types": (SLIDING_ATTENTION,) * 3, "sliding_window": 20},
}
KINDS = {"q_proj": "Q4_K", "k_proj": "Q4_K", "v_proj": "Q6_K", "o_proj": "Q5_0", "gate_proj": "Q4_1",
         "up_proj": "Q4_1", "down_proj": "Q8_0"}  # q/k/v: two block types, two parts of one projection


@pytest.fixture(scope="module")
def cpu_kernels():
    kernels = load_cpu_kernels(str(Path(os.environ["LLMCHAT_CACHE_DIR"]) / "kernels"))
    assert kernels.module is not None, kernels.note
    return kernels.module


def _model(cfg: ModelConfig, cpu_kernels, seed: int):
    gen = torch.Generator().manual_seed(seed)
    h, kv, d = cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim, cfg.head_dim
    shapes = {"q_proj": (h, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, h),
              "gate_proj": (cfg.intermediate_size, h), "up_proj": (cfg.intermediate_size, h),
              "down_proj": (h, cfg.intermediate_size)}

    def norm(name: str, size: int) -> StoredTensor:
        return StoredTensor(name, "F32", (size,), 1.0 + 0.1 * torch.randn(size, generator=gen))

    tensors = [StoredTensor("model.embed_tokens.weight", "Q8_0", (cfg.vocab_size, h),
                            random_blocks("Q8_0", cfg.vocab_size, h, gen, 0.5)), norm("model.norm.weight", h)]
    for i in range(cfg.num_hidden_layers):
        tensors += [norm(f"model.layers.{i}.input_layernorm.weight", h),
                    norm(f"model.layers.{i}.post_attention_layernorm.weight", h)]
        for proj, kind in KINDS.items():
            part = "self_attn" if proj in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            rows, cols = shapes[proj]
            tensors.append(StoredTensor(f"model.layers.{i}.{part}.{proj}.weight", kind, shapes[proj],
                                        random_blocks(kind, rows, cols, gen, 0.3 / cols**0.5)))
            if cfg.attention_bias and proj in ("q_proj", "k_proj", "v_proj"):
                tensors.append(StoredTensor(f"model.layers.{i}.self_attn.{proj}.bias", "F32", (rows,),
                                            0.05 * torch.randn(rows, generator=gen)))
        if cfg.sandwich_norms:
            tensors += [norm(f"model.layers.{i}.pre_feedforward_layernorm.weight", h),
                        norm(f"model.layers.{i}.post_feedforward_layernorm.weight", h)]
        if cfg.qk_norm:
            tensors += [norm(f"model.layers.{i}.self_attn.q_norm.weight", d),
                        norm(f"model.layers.{i}.self_attn.k_norm.weight", d)]
    model = build_quantized_model(cfg, tensors, torch.float32, cpu_kernels)
    model.cpu_kernels = cpu_kernels
    return model


def _prefill(model, cache: PagedKVCache, prompts: list[list[int]], tables: list[list[int]]) -> None:
    """Each prompt's K/V into its blocks, through the Python forward (prefill path)."""
    bs = cache.block_size
    for ids, table in zip(prompts, tables):
        n = len(ids)
        meta = AttentionMetadata(torch.tensor([table[p // bs] * bs + p % bs for p in range(n)]),
                                 torch.tensor([table], dtype=torch.int32), torch.tensor([n], dtype=torch.int32),
                                 torch.tensor([0, n], dtype=torch.int32), is_decode=False)
        with torch.inference_mode():
            model(torch.tensor(ids), torch.arange(n), PagedKV(cache, meta, model.config.attention_scale, "torch",
                                                              model.cpu_kernels))


@pytest.mark.parametrize("name", OPTIONS)
def test_one_decode_step_gives_the_python_forwards_bits(cpu_kernels, name):
    cfg = dataclasses.replace(BASE, **OPTIONS[name])
    model = _model(cfg, cpu_kernels, seed=len(name))
    stack = build_decode_stack(model)
    assert stack is not None, supported(model)
    bs = 16
    cache = PagedKVCache(cfg, bs, 24 * cfg.kv_bytes_per_token(4) * bs, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(7)
    lengths = [5, 16, 37]  # a block's worth, one past two blocks: the new token lands mid-block / at a start
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    tables = [[3, 9, 1], [4, 2], [0, 7, 11, 5]]
    for t in cache.k + cache.v:  # (torch.empty's garbage may hold NaN, which no comparison equals)
        t.zero_()
    _prefill(model, cache, prompts, tables)
    new_ids = torch.tensor([11, 200, 42])
    positions = torch.tensor(lengths)
    slots = torch.tensor([t[p // bs] * bs + p % bs for t, p in zip(tables, lengths)])
    width = max(len(t) for t in tables)
    meta = AttentionMetadata(slots, torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32),
                             torch.tensor([n + 1 for n in lengths], dtype=torch.int32),
                             torch.arange(len(lengths) + 1, dtype=torch.int32), is_decode=True)
    copy = PagedKVCache(cfg, bs, 24 * cfg.kv_bytes_per_token(4) * bs, torch.float32, "cpu")
    for a, b in zip(copy.k + copy.v, cache.k + cache.v):
        a.copy_(b)
    with torch.inference_mode():
        expected = model(new_ids, positions, PagedKV(cache, meta, cfg.attention_scale, "torch", cpu_kernels))
        got = stack.forward(model.embed_tokens(new_ids), positions, meta.slot_mapping, meta.block_tables,
                            meta.seq_lens, copy.k, copy.v)
    assert torch.equal(got, expected)
    assert all(torch.equal(a[b], c[b]) for a, c in zip(copy.k + copy.v, cache.k + cache.v) for b in range(12))


def test_models_it_cannot_take_keep_the_python_forward(cpu_kernels):
    gemma = dataclasses.replace(BASE, sandwich_norms=True, hidden_act="gelu_pytorch_tanh")
    model = _model(gemma, cpu_kernels, seed=1)
    assert build_decode_stack(model) is None and "sandwich" in supported(model)
    model = _model(BASE, cpu_kernels, seed=2)
    model.cpu_kernels = None
    assert build_decode_stack(model) is None


def test_engine_replies_equal_with_and_without_the_stack(default_gguf, monkeypatch):
    from llmchat.core.api.params import SamplingParams
    from llmchat.core.config import EngineConfig
    from llmchat.core.engine.engine import LLMEngine
    from llmchat.core.model.loader import load_model

    loaded = load_model(default_gguf)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = [[1, 504, 3458, 282, 4649, 314], list(range(400, 437)), [1, 28, 9, 2114, 355]]

    def replies() -> tuple[list[list[int]], bool]:
        engine = LLMEngine(loaded, EngineConfig(num_speculative_tokens=0, kv_disk_bytes=0))
        ids = [engine.add_request(p, params) for p in prompts]
        done = {e.request_id: list(e.output_ids) for e in engine.run_until_done() if hasattr(e, "output_ids")}
        return [done[i] for i in ids], engine.runner.decode_stack is not None

    with_stack, used = replies()
    monkeypatch.setenv("LLMCHAT_DECODE_STACK", "off")
    without, unused = replies()
    assert used and not unused
    assert with_stack == without


def test_a_short_multi_token_step_gives_each_token_its_decode_bits(cpu_kernels):
    """A speculative verify step (several new tokens of one sequence) attends token by token with the decode
    kernel, so each row equals the decode step of that token alone: greedy replies keep speculation's promise."""
    cfg = dataclasses.replace(BASE, **OPTIONS["qwen3-qk-norm"])
    model = _model(cfg, cpu_kernels, seed=5)
    stack = build_decode_stack(model)
    bs, table, prompt, new = 16, [2, 6, 4], list(range(30, 51)), [7, 300, 19]
    caches = [PagedKVCache(cfg, bs, 8 * cfg.kv_bytes_per_token(4) * bs, torch.float32, "cpu") for _ in range(2)]
    for cache in caches:
        for t in cache.k + cache.v:
            t.zero_()
        _prefill(model, cache, [prompt], [table])
    n, k = len(prompt), len(new)
    slots = torch.tensor([table[p // bs] * bs + p % bs for p in range(n, n + k)])
    tables = torch.tensor([table], dtype=torch.int32)
    verify = AttentionMetadata(slots, tables, torch.tensor([n + k], dtype=torch.int32),
                               torch.tensor([0, k], dtype=torch.int32), is_decode=False, is_verify=True)
    with torch.inference_mode():
        together = model(torch.tensor(new), torch.arange(n, n + k),
                         PagedKV(caches[0], verify, cfg.attention_scale, "torch", cpu_kernels))
        one_by_one = [stack.forward(model.embed_tokens(torch.tensor([t])), torch.tensor([n + j]), slots[j : j + 1],
                                    tables, torch.tensor([n + j + 1], dtype=torch.int32), caches[1].k, caches[1].v)
                      for j, t in enumerate(new)]
    assert torch.equal(together, torch.cat(one_by_one))
