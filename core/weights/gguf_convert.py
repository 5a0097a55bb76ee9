"""GGUF -> a Hugging Face-layout folder: Hugging Face tensor names, dequantized fp32 weights, config and tokenizer
files. What each architecture's GGUF means is gguf_arch.py's (names, row order) and gguf_config.py's (metadata).

Every metadata number is checked against `check_config_bounds` and the tensor shapes against the config
before anything is dequantized, so a hostile header costs no more memory than the file's own tensors.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import check_tensor_shapes
from .errors import ModelLoadError
from .gguf_arch import gguf_arch, hf_name, to_hf_values
from .gguf_config import config_from_gguf
from .gguf_meta import gguf_value, open_gguf


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize a GGUF into `out_dir` (fp32 safetensors + config + tokenizer files), atomically."""
    from .cache import write_entry

    reader = open_gguf(gguf_path)
    arch = gguf_arch(gguf_value(reader, "general.architecture"), str(gguf_path))
    weights = [(name, t) for t in reader.tensors if (name := hf_name(arch, t.name, str(gguf_path))) is not None]
    config = config_from_gguf(reader, arch, gguf_path, tied="lm_head.weight" not in dict(weights))
    shapes = {name: tuple(int(d) for d in reversed(t.shape)) for name, t in weights}
    check_tensor_shapes(config, shapes, str(gguf_path))  # GGUF lists dims innermost first
    tensors = {name: to_hf_values(arch, name, _dequantize(t, shapes[name], gguf_path), config.num_attention_heads,
                                  config.num_key_value_heads) for name, t in weights}
    files = {"config.json": json.dumps(config.to_hf_dict(), indent=2), **tokenizer_files(reader, gguf_path)}
    write_entry(out_dir, tensors, files, source=gguf_path.name)


def _dequantize(t: Any, shape: tuple[int, ...], path: Path) -> np.ndarray:
    from gguf.quants import dequantize

    try:
        w = dequantize(t.data, t.tensor_type)
    except NotImplementedError as e:
        raise ModelLoadError(f"unsupported tensor type {t.tensor_type.name} in tensor {t.name} of {path}: llmchat "
                             "reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and K-quant tensors") from e
    return np.ascontiguousarray(w.reshape(shape), dtype=np.float32)


def tokenizer_files(reader: Any, path: Path) -> dict[str, str]:
    from .gguf_tokenizer import tokenizer_files_from_gguf

    try:
        return tokenizer_files_from_gguf(reader)
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelLoadError(f"cannot build a tokenizer from {path} ({type(e).__name__}: {e})") from e
