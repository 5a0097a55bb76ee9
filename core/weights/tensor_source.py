"""The loader seam: a model file as a source of named tensors, each as the file stores it.

A source has a `config` (ModelConfig), `tokenizer_files()` (the Hugging Face tokenizer files' text) and yields
`StoredTensor`s one at a time: a Hugging Face name, the stored kind (a GGUF block type such as "Q4_1", or a
float kind "F32"/"F16"/"BF16"), the logical shape (outermost first: `[out_features, in_features]` for a
linear) and the raw data in memory the process owns (block types: uint8 `[rows, row_bytes]`; float kinds: a
tensor of that dtype). Whoever builds the model decides what to keep quantized (core/model/quant_load.py).
Another architecture adds its name mapping and row fixes here, on the same record.

GGUF: the header is bounds-checked (`open_gguf`), every tensor's bytes are read with plain file reads (no live
memory map: a file cut or replaced later would kill the process with SIGBUS), and llama.cpp's Q/K row
permutation is undone on whole rows, which for block types means whole rows of blocks.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import ModelConfig
from .checkpoint import check_tensor_shapes
from .errors import ModelLoadError
from .gguf_arch import gguf_arch, hf_name, needs_unpermute
from .gguf_config import config_from_gguf
from .gguf_convert import tokenizer_files
from .gguf_meta import gguf_value, open_gguf

FLOAT_KINDS = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


@dataclass(slots=True)
class StoredTensor:
    name: str  # Hugging Face name: model.layers.0.self_attn.q_proj.weight
    kind: str  # "F32" | "F16" | "BF16" | a GGUF block type ("Q4_1", "Q8_0", "Q6_K", ...)
    shape: tuple[int, ...]  # logical, outermost first
    data: torch.Tensor  # block types: uint8 [rows, row_bytes]; float kinds: that dtype, `shape`


@dataclass(slots=True)
class _Entry:
    name: str
    kind: str
    shape: tuple[int, ...]
    offset: int  # absolute, in the file
    nbytes: int


def unpermute_rows(data: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row order (RoPE pairs interleaved) on the first dim of `data`: any row format."""
    rows = data.shape[0]
    return data.reshape(num_heads, rows // num_heads // 2, 2, -1).transpose(1, 2).reshape(data.shape).contiguous()


class GGUFSource:
    """The tensors of a GGUF file of any architecture in core/weights/gguf_arch.py, as stored, under Hugging Face names."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        reader = open_gguf(self.path)  # one-line ModelLoadError on a damaged header
        self.arch = gguf_arch(gguf_value(reader, "general.architecture"), str(path))
        size = self.path.stat().st_size
        self.entries: list[_Entry] = []
        for t in reader.tensors:
            shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists dims innermost first
            if int(t.data_offset) + int(t.n_bytes) > size:
                raise ModelLoadError(f"{path} is truncated: tensor {t.name} ends past the end of the file")
            if (name := hf_name(self.arch, t.name, str(path))) is None:
                continue  # a RoPE-parameter tensor (rope_freqs): config_from_gguf reads it
            self.entries.append(_Entry(name, t.tensor_type.name, shape, int(t.data_offset), int(t.n_bytes)))
        names = {e.name for e in self.entries}
        self.config: ModelConfig = config_from_gguf(reader, self.arch, self.path, tied="lm_head.weight" not in names)
        check_tensor_shapes(self.config, {e.name: e.shape for e in self.entries}, str(path))
        self._tokenizer_files = tokenizer_files(reader, self.path)
        del reader  # releases the reader's memory map; tensors are read below with plain reads

    def tokenizer_files(self) -> dict[str, str]:
        return self._tokenizer_files

    def kinds(self) -> list[str]:
        """The stored kinds of the 2-D tensors (the linears and the embedding), sorted."""
        return sorted({e.kind for e in self.entries if len(e.shape) == 2})

    def __iter__(self) -> Iterator[StoredTensor]:
        cfg = self.config
        heads = {"q": cfg.num_attention_heads, "k": cfg.num_key_value_heads}
        with open(self.path, "rb") as f:
            for e in self.entries:
                raw = torch.empty(e.nbytes, dtype=torch.uint8)
                f.seek(e.offset)
                if f.readinto(memoryview(raw.numpy())) != e.nbytes:
                    raise ModelLoadError(f"{self.path} is truncated (tensor {e.name})")
                if e.kind in FLOAT_KINDS:
                    data = raw.view(FLOAT_KINDS[e.kind]).reshape(e.shape)
                else:
                    data = raw.reshape(e.shape[0] if len(e.shape) == 2 else 1, -1)
                if (which := needs_unpermute(self.arch, e.name)) is not None:
                    data = unpermute_rows(data, heads[which])
                elif self.arch.norm_shift and e.name.endswith("norm.weight"):  # Gemma stores 1 + w
                    data = data.float() - self.arch.norm_shift
                yield StoredTensor(e.name, e.kind, e.shape, data)


def dequantize_stored(t: StoredTensor) -> torch.Tensor:
    """Any stored tensor as fp32 of its logical shape (block types through the `gguf` package)."""
    if t.kind in FLOAT_KINDS:
        return t.data.float()
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    try:
        w = dequantize(t.data.numpy(), GGMLQuantizationType[t.kind])
    except (NotImplementedError, KeyError) as e:
        raise ModelLoadError(f"unsupported tensor type {t.kind} in tensor {t.name}: llmchat reads F32, F16, BF16, "
                             "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and K-quant tensors") from e
    return torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).reshape(t.shape)
