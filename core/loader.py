"""Everything needed to run a model, loaded once: config, weights on the device, tokenizer."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from llmchat.core.config import ModelConfig
from llmchat.core.model import Transformer, build_model
from llmchat.core.tokenizer import Tokenizer
from llmchat.core.weights import load_checkpoint, resolve_model

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(slots=True)
class LoadedModel:
    folder: Path
    config: ModelConfig
    model: Transformer
    tokenizer: Tokenizer
    load_seconds: float


def default_dtype(device: str) -> str:
    """CPU: fp32 (AVX2 cores run bf16 GEMV ~3x slower); CUDA: bf16."""
    return "bfloat16" if device.startswith("cuda") else "float32"


def load_model(
    model: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> LoadedModel:
    """Resolve (fetch/convert if needed), memory-map and build the model; raises ModelLoadError on bad input."""
    start = time.perf_counter()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this torch build sees no CUDA GPU; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"unknown device {device!r}; use cpu or cuda")
    dtype = dtype or default_dtype(device)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    folder = resolve_model(model, progress=progress)
    config, state = load_checkpoint(folder, dtype=DTYPES[dtype], device=device)
    net = build_model(config, state, dtype=DTYPES[dtype], device=device)
    tokenizer = Tokenizer.from_dir(folder)
    return LoadedModel(folder, config, net, tokenizer, time.perf_counter() - start)
