"""Shared fixtures: the real default model (fetched once, the way a user's machine gets it)."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

# `python -m pytest` puts the working directory first on sys.path. From the checkout's root that makes its
# folders importable by their bare names, and `kernels/` then shadows Hugging Face's `kernels` package, which
# transformers (5.25 on) imports: the tests that compare with transformers fail to import it. The tests use
# llmchat as installed (`llmchat.kernels`), so the root leaves the path; `pytest -q` never adds it.
_CHECKOUT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != _CHECKOUT]

# Triton reads TRITON_INTERPRET once, at its first import (transformers and torch._dynamo import it too):
# without a GPU, its kernels can only run under the interpreter, so set it before anything imports triton.
import torch  # noqa: E402  (torch itself does not import triton)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


_REAL_CACHE_DIR = Path(os.environ.get("LLMCHAT_CACHE_DIR") or __import__("platformdirs").user_cache_dir("llmchat"))


def isolated_cache_dir(folder: Path) -> Path:
    """A cache dir that shares the real models/ and kernels/ (C++ builds) folders (links) and, as its converted/,
    a converted-models folder the tests keep to themselves (the real cache's `tests-converted/`: the models the
    tests write and dequantize must not show in the user's model picker), and nothing else: the disk tier
    of the prefix cache (kv/) starts empty there, so no test reads or writes the user's, or another test's."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, real in (("models", "models"), ("converted", "tests-converted"), ("kernels", "kernels")):
        (_REAL_CACHE_DIR / real).mkdir(parents=True, exist_ok=True)
        (folder / name).symlink_to(_REAL_CACHE_DIR / real, target_is_directory=True)
    return folder


# Fixtures wider than a test (a server started once per module, say) get one isolated cache dir per test run.
_SESSION_CACHE_DIR = isolated_cache_dir(Path(__import__("tempfile").mkdtemp(prefix="llmchat-test-cache-")))
os.environ["LLMCHAT_CACHE_DIR"] = str(_SESSION_CACHE_DIR)
__import__("atexit").register(__import__("shutil").rmtree, _SESSION_CACHE_DIR, True)  # (unlinks links only)


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    """Every test (and every command it starts) gets its own cache dir (see isolated_cache_dir)."""
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(isolated_cache_dir(tmp_path_factory.mktemp("cache"))))
    # and no config file unless the test writes one: the user's own ~/.config/llmchat/config.toml stays out
    monkeypatch.setenv("LLMCHAT_CONFIG", str(tmp_path_factory.mktemp("config") / "config.toml"))


@pytest.fixture(scope="session")
def default_gguf() -> Path:
    """The default model's GGUF file (SmolLM2-135M-Instruct Q4_1), located or fetched like `llmchat pull` does."""
    from llmchat.core.weights.resolve import ModelLoadError, default_gguf_path

    try:
        return default_gguf_path(download=True)
    except ModelLoadError as e:  # offline and not cached: the model tests cannot run here
        if os.environ.get("CI", "").lower() in ("true", "1"):  # CI sets it: a run without them must not pass
            pytest.fail(f"CI=true and the default model is unavailable: {e}", pytrace=False)
        pytest.skip(f"default model unavailable: {e}")


@pytest.fixture(scope="session")
def default_model_dir(default_gguf) -> Path:
    """The default model converted to a Hugging Face folder (in the user cache, like a real first start)."""
    from llmchat.core.weights.resolve import resolve_model

    return resolve_model(str(default_gguf))


@pytest.fixture(scope="session")
def tiny_model(default_model_dir):
    """A tiny random-weight Llama (2 layers, hidden 64, GQA 4:2) with the default model's real tokenizer.

    Fast enough for engine and UI tests; its replies are gibberish but deterministic.
    """
    from llmchat.core.config import ModelConfig
    from llmchat.core.model.loader import LoadedModel
    from llmchat.core.model.model import build_model
    from llmchat.core.text.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(default_model_dir)
    cfg = ModelConfig(
        architecture="LlamaForCausalLM", vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=10000.0, max_position_embeddings=1024, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = build_model(cfg, None)
    return LoadedModel(default_model_dir, cfg, model, tokenizer, 0.0)


@pytest.fixture(scope="session")
def chatty_model(tiny_model):
    """tiny_model with its own random output head: tied random weights only ever repeat the last token
    (a wall of newlines); an untied head gives varied, deterministic gibberish that is visible on screen."""
    import torch

    from llmchat.core.model.loader import LoadedModel
    from llmchat.core.model.model import build_model

    cfg = dataclasses.replace(tiny_model.config, tie_word_embeddings=False)
    torch.manual_seed(0)
    return LoadedModel(tiny_model.folder, cfg, build_model(cfg, None), tiny_model.tokenizer, 0.0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, default_model_dir) -> Path:
    """A tiny random model as an ordinary Hugging Face folder (the real tokenizer), for `llmchat serve --model`."""
    from serve_helpers import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("serve") / "tiny-llama", default_model_dir)


@pytest.fixture(params=["float32", "bfloat16", "off"])
def many_rows_gemm(request, monkeypatch):
    """The many-rows path's GEMM dtype: the default (fp32), then bf16 where this CPU has bf16 dots, then None
    (no GEMM: every row count on the int8 dots)."""
    from llmchat.kernels.quant_linear import gemm_dtype

    monkeypatch.setenv("LLMCHAT_QUANT_GEMM", request.param)
    gemm_dtype.cache_clear()
    yield gemm_dtype()
    gemm_dtype.cache_clear()  # the next call reads the environment monkeypatch restores
