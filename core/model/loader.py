"""Everything needed to run a model, loaded once: config, weights on the device, tokenizer.

Weights are read one tensor at a time with plain file reads (no memory map, no whole-file dict), each
converted into the model's own storage and dropped: the peak memory of a load is the model plus its
largest tensor, not the checkpoint plus the model.
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import EngineConfig, ModelConfig
from .model import Transformer, build_model
from ..text.tokenizer import Tokenizer
from ..weights.checkpoint import check_tensor_shapes, read_config
from ..weights.errors import ModelLoadError
from ..weights.resolve import cache_dir, find_model, gguf_digest, resolve_model
from ..weights.tensor_source import GGUFSource
from ...kernels.quant_cpu_build import load_cpu_kernels
from .quant_load import build_quantized_model

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
WEIGHT_FORMATS = ("auto", *DTYPES)
_WRAPPED_TEXT = "model.language_model."  # where Gemma4ForConditionalGeneration keeps the text model's weights
_SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8}


@dataclass(slots=True)
class LoadedModel:
    folder: Path
    config: ModelConfig
    model: Transformer
    tokenizer: Tokenizer
    load_seconds: float
    dtype: str = "float32"  # activations and KV cache
    weight_dtype: str = "float32"  # storage of the weights: a dtype, or "gguf:<block types>" kept as stored
    source_id: str = ""  # what the weights were read from, for the KV fingerprint (a GGUF's sha256; else "")


def default_dtype(device: str) -> str:
    """CPU: fp32 (AVX2 cores run bf16 GEMV ~3x slower); CUDA: bf16."""
    return "bfloat16" if device.startswith("cuda") else "float32"


def resolve_weight_dtype(weight_dtype: str | None, device: str, dtype: str, gguf: bool = False) -> str:
    """'auto' (or None): a GGUF file's own block types ("gguf") on the CPU with fp32 activations, read and
    computed as stored (core/model/quant_load.py); else the activation dtype. `float32` is the exact reference
    (a GGUF dequantized at load, through the converted-model cache). bf16 weights under fp32 activations (half the bytes, one
    packed copy, fast on AMX / AVX-512 BF16 CPUs) are opt-in: on the default model they keep the NLL of the
    gate text within 0.2% of fp32 but only 4 of the 10 gate prompts keep the same 24-token greedy reply
    (tests/test_weight_format.py), short of the 9 of 10 a default needs. Anything else is taken as given."""
    choice = weight_dtype or "auto"
    if choice not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {choice!r}; choose one of {', '.join(WEIGHT_FORMATS)}")
    if choice == "auto":
        return "gguf" if gguf and device == "cpu" and dtype == "float32" else dtype
    return choice


class SafetensorsReader(Mapping):
    """The tensors of a folder's *.safetensors files by name, each read from disk when asked for."""

    def __init__(self, files: list[Path], device: str) -> None:
        self.device = device
        self.entries: dict[str, tuple[Path, int, torch.dtype, tuple[int, ...]]] = {}
        for file in files:
            try:
                with open(file, "rb") as f:
                    header_len = int.from_bytes(f.read(8), "little")
                    header = json.loads(f.read(header_len))
                base = 8 + header_len
                for name, info in header.items():
                    if name == "__metadata__":
                        continue
                    start, end = info["data_offsets"]
                    dtype = _SAFETENSORS_DTYPES[info["dtype"]]
                    shape = tuple(info["shape"])
                    assert end - start == torch.empty(shape, dtype=dtype, device="meta").numel() * dtype.itemsize
                    self.entries[name] = (file, base + start, dtype, shape)
            except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
                raise ModelLoadError(f"{file} is not a valid safetensors file ({e})") from e

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: e[3] for name, e in self.entries.items()}

    def __getitem__(self, name: str) -> torch.Tensor:
        file, offset, dtype, shape = self.entries[name]
        t = torch.empty(shape, dtype=dtype)
        with open(file, "rb") as f:
            f.seek(offset)
            if t.numel() and f.readinto(memoryview(t.view(-1).view(torch.uint8).numpy())) != t.nbytes:
                raise ModelLoadError(f"{file} is truncated (tensor {name})")
        return t.to(self.device)

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def open_checkpoint(folder: Path, device: str) -> tuple[ModelConfig, Mapping[str, torch.Tensor]]:
    """Config and lazily read weights (HF names) of a model folder; tied models get no lm_head.weight."""
    config = read_config(folder)  # bounds-checked before anything is sized from it
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no *.safetensors weights")
    reader = SafetensorsReader(files, device)
    if any(name.startswith(_WRAPPED_TEXT) for name in reader.entries):  # a multimodal wrapper: its text model only
        reader.entries = {name.replace(_WRAPPED_TEXT, "model.", 1): e for name, e in reader.entries.items()
                          if name.startswith(_WRAPPED_TEXT) or name == "lm_head.weight"}
    if config.tie_word_embeddings:
        reader.entries.pop("lm_head.weight", None)
    check_tensor_shapes(config, reader.shapes(), str(folder))
    return config, reader


def load_model(
    model: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    progress: Callable[[str], None] | None = None,
    weight_dtype: str | None = None,
) -> LoadedModel:
    """Resolve (fetch/convert if needed) and build the model; raises ModelLoadError on bad input.
    `dtype` is the activation/KV dtype (None: the device's default), `weight_dtype` the weight storage
    ('auto'/None: see resolve_weight_dtype; 'float32' on CPU is the reference path)."""
    start = time.perf_counter()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this torch build sees no CUDA GPU; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"unknown device {device!r}; use cpu or cuda")
    dtype = dtype or default_dtype(device)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    path = find_model(model, progress)
    weight_dtype = resolve_weight_dtype(weight_dtype, device, dtype, gguf=path.is_file())
    if weight_dtype == "gguf":
        return load_gguf_quantized(path, dtype, start, progress)
    folder = resolve_model(path, progress=progress)
    config, state = open_checkpoint(folder, device)
    net = build_model(config, state, dtype=DTYPES[dtype], device=device, weight_dtype=DTYPES[weight_dtype])
    del state
    if device == "cpu":  # the decode step's small ops in C++ (the torch references where it cannot be built)
        net.cpu_kernels = load_cpu_kernels(str(cache_dir() / "kernels")).module
    tokenizer = Tokenizer.from_dir(folder)
    tokenizer.stop_token_ids |= declared_stop_ids(folder, config)
    return LoadedModel(folder, config, net, tokenizer, time.perf_counter() - start, dtype, weight_dtype)


def declared_stop_ids(folder: Path, config: ModelConfig) -> frozenset[int]:
    """Every end id the model declares: config.json's eos_token_id (GGUF: eos, eot and eom ids) and
    generation_config.json's, within the vocabulary; each one ends a reply."""
    ids = set(config.eos_token_ids)
    try:
        eos = json.loads((Path(folder) / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        eos = None
    ids |= set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    return frozenset(i for i in ids if isinstance(i, int) and 0 <= i < config.vocab_size)


def describe(loaded: LoadedModel) -> str:
    """One line on what was loaded: the facts line (core/model/model_facts.py), then activations and layer kinds."""
    from .model_facts import model_facts

    cfg = loaded.config
    kinds = ", ".join(f"{cfg.layer_types.count(k)} {k.replace('_', ' ')}"
                      + (f" ({cfg.sliding_window})" if k == "sliding_attention" else "")
                      for k in dict.fromkeys(cfg.layer_types))
    return f"{model_facts(loaded).line()} ({cfg.num_hidden_layers} layers: {kinds}; activations {loaded.dtype})"


def load_model_for(config: "EngineConfig", progress: Callable[[str], None] | None = None) -> LoadedModel:
    """The model an engine with `config` runs: its model, device, dtype and weight format. The loading
    thread's compute team gets the engine's thread count (loading prepacks weights with parallel ops)."""
    from ..cpu_threads import plan_threads, use_threads

    use_threads(plan_threads(config.num_threads).num_threads)
    return load_model(config.model, config.device, config.dtype, progress, config.weight_dtype)


def load_gguf_quantized(path: Path, dtype: str, start: float,
                        progress: Callable[[str], None] | None = None) -> LoadedModel:
    """A GGUF read as stored: no fp32 copy in memory or on disk (core/weights/tensor_source.py)."""
    source = GGUFSource(path)
    kernels = load_cpu_kernels(str(cache_dir() / "kernels"))
    if kernels.module is None:  # one notice line: the slower torch path runs instead
        (progress or (lambda line: print(line, file=sys.stderr)))(kernels.note)
    net = build_quantized_model(source.config, source, DTYPES[dtype], kernels.module)
    net.cpu_kernels = kernels.module
    tokenizer = Tokenizer.from_files(source.tokenizer_files())
    weight_format = "gguf:" + "+".join(source.kinds())
    return LoadedModel(path, source.config, net, tokenizer, time.perf_counter() - start, dtype, weight_format,
                       gguf_digest(path))
