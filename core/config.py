"""Configuration records: the model's shape (ModelConfig) and how the engine runs it (EngineConfig)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

MAX_SPECULATIVE_TOKENS = 16
DEFAULT_SPECULATIVE_TOKENS = 4  # what the app, ask and serve draft at most per step (EngineConfig's own default: off)
DEFAULT_MODEL_LABEL = "SmolLM2-135M-Instruct"
DEFAULT_KV_DISK_GB = 4.0  # the prefix cache's disk tier budget unless --kv-disk-gb or the config file says

# The kinds of layer a config may list in `layer_types` (Hugging Face's names where it has them):
FULL_ATTENTION = "full_attention"  # causal attention over the whole context, RoPE on q and k
SLIDING_ATTENTION = "sliding_attention"  # causal attention over the last `sliding_window` tokens only
NO_ROPE_ATTENTION = "no_rope_attention"  # full attention without RoPE (SmolLM3's every fourth layer)
LAYER_TYPES = (FULL_ATTENTION, SLIDING_ATTENTION, NO_ROPE_ATTENTION)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """What a decoder-only transformer computes: its shape and the small per-architecture options.

    Read from a Hugging Face config.json (`core/hf_config.py`) or GGUF metadata (`core/weights/gguf_arch.py`).
    The architectures differ only in the options below the shape; `layer_types` says, per layer, which kind
    of attention it runs (empty: every layer full attention)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False  # biases on the q/k/v projections (Qwen2)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    layer_types: tuple[str, ...] = ()  # one of LAYER_TYPES per layer; () = all FULL_ATTENTION
    sliding_window: int | None = None  # SLIDING_ATTENTION layers see the last this-many tokens (their own included)
    rope_scaling: dict | None = None  # Hugging Face's rope parameters past the base: rope_type and its numbers
    rope_local_theta: float | None = None  # SLIDING_ATTENTION layers' own unscaled RoPE base (Gemma 3)
    partial_rotary_factor: float = 1.0  # RoPE turns the first head_dim * this dims of each head (Phi-4-mini 0.75)
    qk_norm: bool = False  # RMSNorm over each q and k head before RoPE (Qwen3, Gemma 3)
    hidden_act: str = "silu"  # the MLP gate's activation: "silu" (SwiGLU) or "gelu_pytorch_tanh" (GeGLU, Gemma)
    sandwich_norms: bool = False  # also normalize each block's output before the residual add (Gemma 2/3)
    norm_weight_offset: float = 0.0  # RMSNorm multiplies by (offset + w): Gemma stores w around 0, offset 1
    embedding_scale: float = 1.0  # embeddings times this (Gemma: sqrt(hidden_size))
    query_pre_attn_scalar: float | None = None  # attention scale is this ** -0.5 (Gemma); None: head_dim ** -0.5
    attn_logit_softcapping: float | None = None  # scores -> cap * tanh(scores / cap) (Gemma 2)
    final_logit_softcapping: float | None = None  # logits -> cap * tanh(logits / cap) (Gemma 2)
    global_head_dim: int | None = None  # head size of FULL_ATTENTION layers where it differs (Gemma 4); None: head_dim
    num_kv_shared_layers: int = 0  # the last this-many layers store no K/V: each reads kv_source_of (Gemma 4)
    value_norm: bool = False  # RMSNorm without a weight over each v head (Gemma 4)
    double_wide_mlp: bool = False  # KV-shared layers' MLP is twice intermediate_size wide (Gemma 4 E2B)
    per_layer_input_size: int = 0  # per-layer embeddings (PLE) of this size feed every layer; 0: none (Gemma 4)
    layer_scalar: bool = False  # each layer's output times a learned scalar (Gemma 4)

    def __post_init__(self) -> None:
        assert self.num_attention_heads % self.num_key_value_heads == 0, "GQA needs q heads % kv heads == 0"
        if not self.layer_types:
            object.__setattr__(self, "layer_types", (FULL_ATTENTION,) * self.num_hidden_layers)
        elif len(set(self.layer_types)) == 1 and len(self.layer_types) != self.num_hidden_layers:
            # one kind for every layer (dataclasses.replace of num_hidden_layers, in tests): as many as layers
            object.__setattr__(self, "layer_types", self.layer_types[:1] * self.num_hidden_layers)
        assert len(self.layer_types) == self.num_hidden_layers, (len(self.layer_types), self.num_hidden_layers)
        assert set(self.layer_types) <= set(LAYER_TYPES), self.layer_types
        assert SLIDING_ATTENTION not in self.layer_types or (self.sliding_window or 0) > 0, "sliding layers need a window"
        assert 0 <= self.num_kv_shared_layers < self.num_hidden_layers, "some layer must store its own K/V"
        for i in range(self.num_hidden_layers - self.num_kv_shared_layers, self.num_hidden_layers):
            self.kv_source_of(i)  # a KV-shared layer needs an earlier storing layer of its kind

    @property
    def attention_scale(self) -> float:
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    @property
    def rotary_dim(self) -> int:
        """How many leading dims of each head RoPE turns (even), at head size head_dim."""
        return int(self.head_dim * self.partial_rotary_factor) // 2 * 2

    def head_dim_of(self, layer_idx: int) -> int:
        """Head size of layer `layer_idx` (Gemma 4: full-attention layers have their own, global_head_dim)."""
        full = self.layer_types[layer_idx] == FULL_ATTENTION
        return self.global_head_dim if full and self.global_head_dim else self.head_dim

    def rotary_dim_of(self, layer_idx: int) -> int:
        """How many leading dims of layer `layer_idx`'s heads RoPE turns (even)."""
        return int(self.head_dim_of(layer_idx) * self.partial_rotary_factor) // 2 * 2

    def intermediate_size_of(self, layer_idx: int) -> int:
        wide = self.double_wide_mlp and self.kv_source_of(layer_idx) != layer_idx
        return self.intermediate_size * (2 if wide else 1)

    def kv_source_of(self, layer_idx: int) -> int:
        """The layer whose K/V layer `layer_idx` attends over: itself, or, for one of the last
        num_kv_shared_layers, the last layer before them of the same kind (Hugging Face's kv_sharing_modes)."""
        first_shared = self.num_hidden_layers - self.num_kv_shared_layers
        if layer_idx < first_shared:
            return layer_idx
        kind = self.layer_types[layer_idx]
        sources = [i for i in range(first_shared) if self.layer_types[i] == kind]
        assert sources, f"KV-shared layer {layer_idx} ({kind}) has no earlier {kind} layer to read"
        return sources[-1]

    def window_of(self, layer_idx: int) -> int:
        """The number of most recent tokens layer `layer_idx` attends to; 0 = the whole context."""
        return self.sliding_window or 0 if self.layer_types[layer_idx] == SLIDING_ATTENTION else 0

    def kv_bytes_per_token(self, element_size: int) -> int:
        """Bytes of K and V that one token occupies across all layers (GQA: kv heads, not q heads)."""
        head_dims = (self.head_dim_of(i) for i in range(self.num_hidden_layers) if self.kv_source_of(i) == i)
        return 2 * self.num_key_value_heads * sum(head_dims) * element_size

    @classmethod
    def from_hf_dict(cls, cfg: dict) -> "ModelConfig":
        from .hf_config import config_from_hf_dict

        return config_from_hf_dict(cfg)

    @classmethod
    def from_dir(cls, folder: Path) -> "ModelConfig":
        return cls.from_hf_dict(json.loads((Path(folder) / "config.json").read_text()))

    def to_hf_dict(self) -> dict:
        """A config.json that from_hf_dict reads back to this config (llmchat's own spelling of the options)."""
        from .hf_config import config_to_hf_dict

        return config_to_hf_dict(self)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the engine runs a model: device, dtype, KV budget and batching limits."""

    model: str | None = None  # None: the default model (SmolLM2-135M-Instruct)
    device: str = "cpu"
    dtype: str | None = None  # activations and KV cache; None: the device's default (cpu fp32, cuda bf16)
    weight_dtype: str = "auto"  # weight storage; auto: `dtype`; "bfloat16" with fp32 activations is opt-in
    block_size: int = 16
    kv_cache_bytes: int | None = None  # None: a default that suits the device
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    enable_prefix_caching: bool = True
    kv_disk_bytes: int = 0  # the prefix cache's disk tier budget; 0: off (the command line turns it on by default)
    kv_disk_dir: str | None = None  # None: <cache dir>/kv
    kernel_backend: str | None = None  # None: triton on CUDA, torch otherwise (resolved once, by the runner)
    num_speculative_tokens: int = 0  # most tokens drafted per sequence and step (adaptive below it); 0: off (default)
    draft_model: str | None = None  # a model with the same vocabulary that drafts; None: prompt lookup (n-grams)
    num_threads: int | None = None  # the compute team's size; None: auto (core/cpu_threads.py, core/cpu_load.py)
    pin_fraction: float = 0.25  # the share of the KV blocks pinned chats may keep out of LRU eviction

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be at least 1")
        if not 0 <= self.num_speculative_tokens <= MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"the number of speculative tokens must be 0 (off) to {MAX_SPECULATIVE_TOKENS}, "
                             f"got {self.num_speculative_tokens}")
        if self.num_threads is not None and (isinstance(self.num_threads, bool) or self.num_threads < 1):
            raise ValueError(f"the number of threads (--threads) must be at least 1, got {self.num_threads}")
        if not 0 <= self.pin_fraction <= 1:
            raise ValueError(f"the pin budget is a fraction of the KV cache from 0 to 1, got {self.pin_fraction}")
        if self.kv_disk_bytes < 0:
            raise ValueError("the disk tier's budget (--kv-disk-gb) must not be negative")


def model_label(model: str | None) -> str:
    """The name to show for --model (a .gguf file or a model folder), or the default model's."""
    if model is None:
        return DEFAULT_MODEL_LABEL
    path = Path(model)
    return path.stem if path.suffix.lower() == ".gguf" else path.name
