"""Model names: what each form means, how a quantization picks a repo's GGUF (as llama.cpp's -hf does), and the
header-only summary of a GGUF checked against gguf.GGUFReader reading the whole file."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from model_files import write_tiny_gguf
from llmchat.core.weights.errors import ModelLoadError
from llmchat.core.weights.gguf_summary import file_type_name, summarize_gguf
from llmchat.core.weights.names import ModelRef, is_model_gguf, parse_model_name, pick_gguf, quant_of

QUANTS = ["Q4_K_M", "Q4_K_S", "Q4_K", "Q5_K_M", "Q8_0", "Q4_0", "Q4_1", "IQ4_XS", "IQ2_XXS", "F16", "BF16", "Q6_K"]


def test_names_mean_what_the_help_says(tmp_path):
    cache = tmp_path / "models"
    cache.mkdir()
    (cache / "mine.gguf").write_bytes(b"GGUF")
    real = tmp_path / "a.gguf"
    real.write_bytes(b"GGUF")
    assert parse_model_name(None) == ModelRef("default", "default") == parse_model_name("default")
    assert parse_model_name(str(real)) == ModelRef("path", str(real))
    assert parse_model_name("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M") == ModelRef(
        "hub", "bartowski/Llama-3.2-1B-Instruct-GGUF", "Q4_K_M")
    assert parse_model_name("hf:org/repo") == ModelRef("hub", "org/repo") == parse_model_name("hf.co/org/repo")
    assert parse_model_name("ollama:llama3.2:1b") == ModelRef("ollama", "llama3.2:1b")
    assert parse_model_name("ollama:llama3.2") == ModelRef("ollama", "llama3.2:latest")
    assert parse_model_name("ollama:hf.co/org/repo:Q4_K_M") == ModelRef("ollama", "hf.co/org/repo:Q4_K_M")
    assert parse_model_name("lmstudio:lmstudio-community/Qwen-GGUF:Q8_0") == ModelRef(
        "lmstudio", "lmstudio-community/Qwen-GGUF", "Q8_0")
    assert parse_model_name("mine.gguf", cache) == ModelRef("cache", "mine.gguf")
    assert str(parse_model_name("ollama:x:1b")) == "ollama:x:1b" and str(parse_model_name("o/r:Q8_0")) == "o/r:Q8_0"


@pytest.mark.parametrize("text, says", [
    ("nothing-here", "unknown model name 'nothing-here'"),
    ("./missing.gguf", "model not found: ./missing.gguf"),
    ("a/b/c", "model not found: a/b/c"),
    ("org/repo:", "is not of the form org/repo[:QUANT]"),
    ("ollama:bad name", "is not an Ollama name"),
    ("ollama:../../etc:x", "is not an Ollama name"),
    ("lmstudio:norepo", "is not of the form org/repo[:QUANT]"),
])
def test_a_bad_name_is_one_line_that_says_what_is_accepted(text, says):
    with pytest.raises(ModelLoadError) as e:
        parse_model_name(text)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_quantization_is_a_word_of_the_file_name():
    assert quant_of("Llama-3.2-1B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_of("SmolLM2-135M-Instruct.Q4_1.gguf") == "Q4_1"
    assert quant_of("qwen2.5-0.5b-instruct-q8_0.gguf") == "Q8_0"
    assert quant_of("model-Q4_K_M-00001-of-00003.gguf") == "Q4_K_M"
    assert quant_of("ggml-model.gguf") is None and quant_of("Q4-notes.gguf") is None
    assert not is_model_gguf("mmproj-model-f16.gguf") and not is_model_gguf("m-Q8_0-00002-of-00002.gguf")
    assert is_model_gguf("m-Q8_0-00001-of-00002.gguf") and not is_model_gguf("README.md")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(QUANTS), min_size=1, max_size=6, unique=True), st.sampled_from(["-", "."]),
       st.booleans())
def test_each_quantization_picks_its_own_file_and_no_other(quants, sep, lower):
    files = {f"Model-7B{sep}{q.lower() if lower else q}.gguf": 1_000_000 * (i + 1) for i, q in enumerate(quants)}
    files["README.md"] = 10
    for q, name in zip(quants, [n for n in files if n.endswith(".gguf")]):
        assert pick_gguf(files, q, "repo") == name  # Q4_K never picks Q4_K_M, and case does not matter
        assert pick_gguf(files, q.lower(), "repo") == name
        assert pick_gguf(files, name, "repo") == name
    missing = next(q for q in QUANTS + ["Q3_K_L"] if q not in quants)
    with pytest.raises(ModelLoadError) as e:
        pick_gguf(files, missing, "repo")
    assert f"no GGUF for {missing!r}" in str(e.value) and all(n in str(e.value) for n in files if n.endswith(".gguf"))
    if len(quants) == 1:
        assert pick_gguf(files, None, "repo") == next(iter(files))
    else:
        with pytest.raises(ModelLoadError, match=f"has {len(quants)} GGUF files; name one"):
            pick_gguf(files, None, "repo")


def test_a_repo_without_a_gguf_says_so():
    with pytest.raises(ModelLoadError, match="has no GGUF file .it holds safetensors"):
        pick_gguf({"model.safetensors": 5, "config.json": 1}, "Q4_K_M", "org/repo")


@settings(max_examples=15, deadline=None)
@given(st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=3), min_size=1, max_size=4),
       st.sampled_from([0, 1, 2, 3, 7, 15, 18, 32]), st.integers(1, 1 << 20), st.sampled_from(["llama", "qwen2"]))
def test_the_header_summary_matches_the_full_reader(tmp_path_factory, shapes, file_type, ctx, arch):
    import gguf

    path = write_tiny_gguf(tmp_path_factory.mktemp("g") / "m.gguf", arch, file_type, ctx,
                           tuple(tuple(s) for s in shapes))
    reader = gguf.GGUFReader(path)  # the reference: every field and tensor parsed
    summary = summarize_gguf(path)
    assert summary.architecture == reader.fields["general.architecture"].contents() == arch
    assert summary.context_length == reader.fields[f"{arch}.context_length"].contents() == ctx
    assert summary.quantization == file_type_name(reader.fields["general.file_type"].contents())
    assert summary.num_params == sum(int(t.n_elements) for t in reader.tensors) == sum(math.prod(s) for s in shapes)


def test_a_file_that_is_not_a_gguf_is_one_line(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    with pytest.raises(ModelLoadError, match="is not a valid GGUF file"):
        summarize_gguf(bad)
    assert file_type_name(15) == "Q4_K_M" and file_type_name(0) == "F32"
