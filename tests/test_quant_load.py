"""The model built from a tensor source keeping GGUF blocks (core/model/quant_load.py) against the fp32 model
built from the same tensors dequantized: mixed block types per fused projection, float tensors, biases, a tied
and an untied head; the many-rows path (all fp32) nearly exactly, the int8-activation path within its rounding."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from llmchat.core.config import ModelConfig
from llmchat.core.model.dense import DenseKV
from llmchat.core.model.model import Linear, build_model
from llmchat.core.model.quant_layers import QuantEmbedding, QuantLinear
from llmchat.core.model.quant_load import build_quantized_model
from llmchat.core.weights.errors import ModelLoadError
from llmchat.core.weights.tensor_source import StoredTensor, dequantize_stored
from llmchat.kernels.quant_blocks import BLOCK_LAYOUTS
from llmchat.kernels.quant_cpu_build import load_cpu_kernels
from llmchat.kernels.quant_linear import GEMM_MIN_ROWS
from quant_testing import random_blocks

CFG = ModelConfig(
    architecture="LlamaForCausalLM", vocab_size=300, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5, rope_theta=10000.0,
    max_position_embeddings=256, tie_word_embeddings=True,
)
# per layer: the stored kind of each projection (layer 1 holds an F16 q: its whole fused q/k/v goes fp32; its
# o_proj and down_proj are the 2- and 3-bit K-quants, kept as stored too)
KINDS = [
    {"q_proj": "Q4_K", "k_proj": "Q4_K", "v_proj": "Q6_K", "o_proj": "Q5_0", "gate_proj": "Q4_1",
     "up_proj": "Q4_1", "down_proj": "Q8_0"},
    {"q_proj": "F16", "k_proj": "Q5_K", "v_proj": "Q5_1", "o_proj": "Q3_K", "gate_proj": "Q6_K",
     "up_proj": "Q8_0", "down_proj": "Q2_K"},
]


def _tensor(name: str, kind: str, shape: tuple[int, ...], gen: torch.Generator) -> StoredTensor:
    if kind in BLOCK_LAYOUTS:
        scale = 0.5 if "embed" in name else 0.3 / shape[1] ** 0.5  # outputs of order one
        return StoredTensor(name, kind, shape, random_blocks(kind, shape[0], shape[1], gen, scale))
    dtype = {"F32": torch.float32, "F16": torch.float16}[kind]
    values = 1.0 + 0.1 * torch.randn(shape, generator=gen) if "norm" in name else torch.randn(shape, generator=gen)
    return StoredTensor(name, kind, shape, (values * (0.05 if "bias" in name else 1)).to(dtype))


def stored_tensors(cfg: ModelConfig, head_kind: str | None, seed: int) -> list[StoredTensor]:
    gen = torch.Generator().manual_seed(seed)
    h, kv = cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim
    shapes = {"q_proj": (h, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, h),
              "gate_proj": (cfg.intermediate_size, h), "up_proj": (cfg.intermediate_size, h),
              "down_proj": (h, cfg.intermediate_size)}
    out = [_tensor("model.embed_tokens.weight", "Q8_0", (cfg.vocab_size, h), gen)]
    for i, kinds in enumerate(KINDS[: cfg.num_hidden_layers]):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out.append(_tensor(f"model.layers.{i}.{norm}.weight", "F32", (h,), gen))
        for proj, kind in kinds.items():
            part = "self_attn" if proj.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            out.append(_tensor(f"model.layers.{i}.{part}.{proj}.weight", kind, shapes[proj], gen))
            if cfg.attention_bias and proj in ("q_proj", "k_proj", "v_proj"):
                out.append(_tensor(f"model.layers.{i}.self_attn.{proj}.bias", "F32", (shapes[proj][0],), gen))
    out.append(_tensor("model.norm.weight", "F32", (h,), gen))
    if head_kind is not None:
        out.append(_tensor("lm_head.weight", head_kind, (cfg.vocab_size, h), gen))
    return out[::-1] if seed % 2 else out  # the order of a file is not the model's


@pytest.fixture(scope="module")
def cpu_kernels():
    import os
    from pathlib import Path

    kernels = load_cpu_kernels(str(Path(os.environ["LLMCHAT_CACHE_DIR"]) / "kernels"))
    assert kernels.module is not None, kernels.note
    return kernels.module


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        hidden = model(ids, torch.arange(len(ids)), DenseKV(model, len(ids)))
        return model.compute_logits(hidden)


@pytest.mark.parametrize("head_kind, bias", [(None, False), ("Q6_K", True), ("F16", False)])
def test_quantized_model_matches_fp32_model_on_the_same_tensors(cpu_kernels, head_kind, bias, many_rows_gemm):
    cfg = dataclasses.replace(CFG, tie_word_embeddings=head_kind is None, attention_bias=bias)
    tensors = stored_tensors(cfg, head_kind, seed=len(str(head_kind)) + bias)
    quantized = build_quantized_model(cfg, tensors, torch.float32, cpu_kernels)
    reference = build_model(cfg, {t.name: dequantize_stored(t) for t in tensors})
    layer0, layer1 = quantized.layers
    assert isinstance(quantized.embed_tokens, QuantEmbedding)
    assert [p.qtype for p in layer0.self_attn.qkv_proj.parts] == ["Q4_K", "Q6_K"]  # q and k merged
    assert [p.qtype for p in layer0.mlp.gate_up_proj.parts] == ["Q4_1"]
    assert isinstance(layer1.self_attn.qkv_proj, Linear)  # an F16 part: fp32 for the whole fusion
    assert [p.qtype for p in layer1.self_attn.o_proj.parts] == ["Q3_K"]
    assert [p.qtype for p in layer1.mlp.down_proj.parts] == ["Q2_K"]
    assert (layer0.self_attn.qkv_proj.bias is not None) == bias == (layer1.self_attn.qkv_proj.bias is not None)
    assert isinstance(quantized.lm_head, QuantLinear) == (head_kind == "Q6_K")
    gen = torch.Generator().manual_seed(5)
    for num_tokens in (3, GEMM_MIN_ROWS + 6):
        ids = torch.randint(0, cfg.vocab_size, (num_tokens,), generator=gen)
        got, want = _logits(quantized, ids), _logits(reference, ids)
        err = ((got - want).abs().max() / want.abs().max()).item()
        on_gemm = num_tokens >= GEMM_MIN_ROWS and many_rows_gemm is not None
        if on_gemm and many_rows_gemm == torch.float32:  # dequantize, multiply in fp32
            assert err < 1e-4, err
        elif on_gemm:  # bf16 operands and output: ~0.4% per linear, as int8 activations
            assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.9
        elif num_tokens >= GEMM_MIN_ROWS:  # GEMM off, int8 activations at every position: a random model has
            typical = ((got - want).abs().amax(-1) / want.abs().max()).median().item()  # a few outlier rows
            assert typical < 0.05 and (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.8, typical
        else:  # int8 activations per 32-block: ~0.4% per linear, through two layers
            assert err < 0.05, err
            assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.6


def test_weight_bytes_count_the_stored_blocks(cpu_kernels):
    tensors = stored_tensors(CFG, None, seed=0)
    model = build_quantized_model(CFG, tensors, torch.float32, cpu_kernels)
    layer1_qkv = [t for t in tensors if ".1.self_attn." in t.name and t.name.split(".")[-2] in ("q_proj", "k_proj",
                                                                                              "v_proj")]
    fp32_extra = sum(4 * t.shape[0] * t.shape[1] for t in layer1_qkv)  # that fusion went fp32
    stored = sum(t.data.nbytes for t in tensors if t not in layer1_qkv)
    assert model.weight_bytes() == stored + fp32_extra


def test_missing_and_unexpected_tensors_are_one_line_errors(cpu_kernels):
    tensors = stored_tensors(CFG, None, seed=0)
    with pytest.raises(ModelLoadError, match="lacks part of layers.0.self_attn.qkv_proj.weight"):
        build_quantized_model(CFG, [t for t in tensors if t.name != "model.layers.0.self_attn.k_proj.weight"],
                              torch.float32, cpu_kernels)
    with pytest.raises(ModelLoadError, match="lacks 'norm.weight'"):
        build_quantized_model(CFG, [t for t in tensors if t.name != "model.norm.weight"], torch.float32, cpu_kernels)
    extra = StoredTensor("model.layers.0.mlp.fancy.weight", "F32", (4,), torch.zeros(4))
    with pytest.raises(ModelLoadError, match="unexpected tensor"):
        build_quantized_model(CFG, [*tensors, extra], torch.float32, cpu_kernels)
    with pytest.raises(ModelLoadError, match="twice"):
        build_quantized_model(CFG, [*tensors, tensors[0]], torch.float32, cpu_kernels)
