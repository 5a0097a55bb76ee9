"""Configuration records: the model's shape (ModelConfig) and how the engine runs it (EngineConfig)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
MAX_SPECULATIVE_TOKENS = 16
DEFAULT_SPECULATIVE_TOKENS = 4  # what the app, ask and serve draft at most per step (EngineConfig's own default: off)
DEFAULT_MODEL_LABEL = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The shape of a Llama-family decoder, read from a Hugging Face config.json."""

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
    attention_bias: bool = False  # Qwen2 has biases on q/k/v projections
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        assert self.num_attention_heads % self.num_key_value_heads == 0, "GQA needs q heads % kv heads == 0"

    def kv_bytes_per_token(self, element_size: int) -> int:
        """Bytes of K and V that one token occupies across all layers (GQA: kv heads, not q heads)."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * element_size

    @classmethod
    def from_hf_dict(cls, cfg: dict) -> "ModelConfig":
        archs = cfg.get("architectures") or [""]
        arch = archs[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {arch or '(none)'!r}; llmchat runs {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        num_heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        return cls(
            architecture=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=num_heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or num_heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", arch == "Qwen2ForCausalLM")),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )

    @classmethod
    def from_dir(cls, folder: Path) -> "ModelConfig":
        return cls.from_hf_dict(json.loads((Path(folder) / "config.json").read_text()))

    def to_hf_dict(self) -> dict:
        d = asdict(self)
        arch = d.pop("architecture")
        eos = d.pop("eos_token_ids")
        d["architectures"] = [arch]
        d["model_type"] = "qwen2" if arch == "Qwen2ForCausalLM" else "llama"
        d["eos_token_id"] = list(eos) if len(eos) != 1 else eos[0]
        d["hidden_act"] = "silu"
        return d


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

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be at least 1")
        if not 0 <= self.num_speculative_tokens <= MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"the number of speculative tokens must be 0 (off) to {MAX_SPECULATIVE_TOKENS}, "
                             f"got {self.num_speculative_tokens}")
        if self.kv_disk_bytes < 0:
            raise ValueError("the disk tier's budget (--kv-disk-gb) must not be negative")


def model_label(model: str | None) -> str:
    """The name to show for --model (a .gguf file or a model folder), or the default model's."""
    if model is None:
        return DEFAULT_MODEL_LABEL
    path = Path(model)
    return path.stem if path.suffix.lower() == ".gguf" else path.name
