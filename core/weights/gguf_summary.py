"""What a model file is, read from its header only: architecture, quantization, parameters, context length.

`summarize_gguf` walks a GGUF header with the bounds-checked cursor of `gguf_meta` (every count and length
checked against limits and the file's size), keeps the few scalar keys a listing shows and the tensor shapes
(their product is the parameter count), and skips every array (vocabularies, merges) without decoding it: a
listing of many files stays cheap and loads no tensor. `summarize_folder` does the same for a Hugging Face
folder from `config.json` and the safetensors headers.
"""
from __future__ import annotations

import json
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelLoadError
from .gguf_meta import MAX_KEY_BYTES, MAX_KV_PAIRS, MAX_STRING_BYTES, MAX_TENSOR_DIMS, MAX_TENSORS, _Scan

_STRING, _ARRAY = 8, 9
_INTS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 10: "Q", 11: "q"}
_WANTED = ("general.architecture", "general.name", "general.file_type")
_DTYPE_NAMES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


@dataclass(frozen=True, slots=True)
class ModelSummary:
    architecture: str | None
    quantization: str | None  # "Q4_K_M", "Q4_1", "BF16", ...
    num_params: int | None
    context_length: int | None
    name: str | None = None  # general.name, when the file has one


def file_type_name(value: int | None) -> str | None:
    """llama.cpp's name for `general.file_type` (MOSTLY_Q4_K_M -> Q4_K_M)."""
    if value is None:
        return None
    import gguf

    try:
        return gguf.LlamaFileType(value).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"type {value}"


def _scalars(scan: _Scan) -> dict[str, object]:
    """The metadata's strings and integers (arrays skipped); the scan ends at the first tensor record."""
    out: dict[str, object] = {}
    num_kv = scan.take("Q")
    if num_kv > MAX_KV_PAIRS:
        raise ValueError(f"it claims {num_kv} metadata keys (the limit is {MAX_KV_PAIRS})")
    for _ in range(num_kv):
        key = scan.string(MAX_KEY_BYTES, "a metadata key").decode("utf-8", "replace")
        kind = scan.take("I")
        if kind in _INTS:
            out[key] = scan.take(_INTS[kind])
        elif kind == _STRING:
            out[key] = scan.string(MAX_STRING_BYTES, f"the value of {key}").decode("utf-8", "replace")
        else:
            scan.value(kind, key)
    return out


def summarize_gguf(path: Path) -> ModelSummary:
    """The header's facts; ModelLoadError (one line) when the file is not a readable GGUF."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            with memoryview(mapped) as buf:
                if bytes(buf[:4]) != b"GGUF":
                    raise ValueError("no GGUF magic number")
                scan = _Scan(buf, "<")
                scan.skip(4, "the magic number")
                version = scan.take("I")
                if version & 0xFFFF == 0:
                    scan.order, version = ">", struct.unpack(">I", struct.pack("<I", version))[0]
                if version not in (2, 3):
                    raise ValueError(f"GGUF version {version}")
                num_tensors = scan.take("Q")
                if num_tensors > MAX_TENSORS:
                    raise ValueError(f"it claims {num_tensors} tensors (the limit is {MAX_TENSORS})")
                meta = _scalars(scan)
                num_params = 0
                for _ in range(num_tensors):
                    scan.string(MAX_KEY_BYTES, "a tensor name")
                    num_dims = scan.take("I")
                    if not 1 <= num_dims <= MAX_TENSOR_DIMS:
                        raise ValueError(f"a tensor has {num_dims} dimensions")
                    num_params += math.prod(scan.take("Q") for _ in range(num_dims))
                    scan.skip(12, "a tensor's type and offset")
                del scan
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path} is not a valid GGUF file ({e})") from e
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    ctx = meta.get(f"{arch}.context_length") if arch else None
    name = meta.get("general.name")
    file_type = meta.get("general.file_type")
    return ModelSummary(arch, file_type_name(file_type if isinstance(file_type, int) else None),
                        num_params or None, ctx if isinstance(ctx, int) else None,
                        name if isinstance(name, str) else None)


def _safetensors_params(path: Path) -> int:
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > 1 << 27:
            raise ValueError(f"{path.name} has a {header_len}-byte header")
        header = json.loads(f.read(header_len))
    return sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")


def summarize_folder(folder: Path) -> ModelSummary:
    """A Hugging Face folder's facts from config.json and its safetensors headers (no tensor read)."""
    try:
        config = json.loads((folder / "config.json").read_text())
        num_params = sum(_safetensors_params(p) for p in sorted(folder.glob("*.safetensors"))) or None
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        raise ModelLoadError(f"{folder} is not a readable model folder ({e})") from e
    if not isinstance(config, dict):
        raise ModelLoadError(f"{folder}/config.json is not a JSON object")
    archs = config.get("architectures")
    arch = config.get("model_type") or (archs[0] if isinstance(archs, list) and archs else None)
    dtype = config.get("torch_dtype") or config.get("dtype")
    ctx = config.get("max_position_embeddings")
    return ModelSummary(str(arch) if arch else None, _DTYPE_NAMES.get(str(dtype), dtype and str(dtype)),
                        num_params, ctx if isinstance(ctx, int) else None)
