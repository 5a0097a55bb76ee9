"""The GGUF tensor source (the loader seam) on the default model's file: tensors as stored, under Hugging Face
names, Q/K block rows unpermuted so that they dequantize to exactly the fp32 reference conversion."""
from __future__ import annotations

import shutil

import pytest
import torch

from llmchat.core.model.loader import open_checkpoint
from llmchat.core.weights.errors import ModelLoadError
from llmchat.core.weights.tensor_source import GGUFSource, dequantize_stored, unpermute_rows
from llmchat.kernels.quant_blocks import dequantize_blocks_ref


@pytest.fixture(scope="module")
def source(default_gguf):
    return GGUFSource(default_gguf)


def test_tensors_come_as_stored(source, default_gguf):
    assert source.kinds() == ["Q4_1", "Q8_0"]
    tensors = {t.name: t for t in source}
    embed = tensors["model.embed_tokens.weight"]
    assert embed.kind == "Q8_0" and embed.shape == (49152, 576) and embed.data.shape == (49152, 576 // 32 * 34)
    down = tensors["model.layers.3.mlp.down_proj.weight"]
    assert down.kind == "Q4_1" and down.shape == (576, 1536) and down.data.dtype == torch.uint8
    assert tensors["model.norm.weight"].kind == "F32" and tensors["model.norm.weight"].data.shape == (576,)
    assert "lm_head.weight" not in tensors and source.config.tie_word_embeddings
    assert sum(t.data.nbytes for t in tensors.values()) == sum(e.nbytes for e in source.entries)
    assert sum(t.data.nbytes for t in tensors.values()) <= default_gguf.stat().st_size


def test_blocks_dequantize_to_the_reference_conversion(source, default_model_dir):
    """q/k rows unpermuted as whole rows of blocks equal the fp32 folder's unpermuted weights, bit for bit."""
    _, reference = open_checkpoint(default_model_dir, "cpu")
    wanted = {f"model.layers.{i}.self_attn.{p}.weight" for i in (0, 29) for p in ("q_proj", "k_proj", "v_proj")}
    wanted |= {"model.layers.7.mlp.up_proj.weight", "model.norm.weight"}
    seen = 0
    for t in source:
        if t.name in wanted:
            torch.testing.assert_close(dequantize_stored(t), reference[t.name], rtol=0, atol=0)
            if t.kind == "Q4_1":  # and our own torch dequantization agrees
                torch.testing.assert_close(dequantize_blocks_ref(t.kind, t.data), reference[t.name], rtol=2e-7,
                                           atol=0)
            seen += 1
    assert seen == len(wanted)


def test_unpermute_rows_is_the_same_for_blocks_and_floats():
    gen = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (24, 40), generator=gen, dtype=torch.uint8)  # 24 rows of 2 Q4_1 blocks
    floats = dequantize_blocks_ref("Q4_1", blocks)
    torch.testing.assert_close(dequantize_blocks_ref("Q4_1", unpermute_rows(blocks, 3)), unpermute_rows(floats, 3),
                               rtol=0, atol=0, equal_nan=True)
    assert not torch.equal(unpermute_rows(blocks, 3), blocks)


def test_truncated_file_is_one_line(default_gguf, tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(default_gguf, "rb") as src, open(cut, "wb") as dst:
        shutil.copyfileobj(src, dst)
        dst.truncate(default_gguf.stat().st_size - 1000)
    with pytest.raises(ModelLoadError, match="truncated") as info:
        list(GGUFSource(cut))
    assert "\n" not in str(info.value)
