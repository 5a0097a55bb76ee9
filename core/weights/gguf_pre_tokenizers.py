"""llama.cpp's `tokenizer.ggml.pre` names for byte-level BPE vocabularies -> a Hugging Face pre-tokenizer.

Each name llama.cpp knows maps to one of its LLAMA_VOCAB_PRE_TYPE_* split rules (llama-vocab.cpp); the regexes
here are the ones of the models' own tokenizer.json files, which llama.cpp's adapted ones mirror.
"""
from __future__ import annotations

from typing import Any

from tokenizers import Regex, normalizers, pre_tokenizers

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TEKKEN_SPLIT = (  # Mistral Nemo / Pixtral's tekken
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O_SPLIT = (  # o200k: GPT-4o, Llama 4, Phi-4-mini
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_DEFAULT_SPLITS = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2_SPLIT, r"\p{N}+", r"[0-9][0-9][0-9]")  # LLAMA_VOCAB_PRE_TYPE_DEFAULT

# llama.cpp's name groups (llama-vocab.cpp, `tokenizer_pre == ...`), by the split they share.
_GPT2_NAMES = ("gpt2", "gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling",
               "gigachat", "mellum", "a.x-4.0")
_DIGITS_THEN_GPT2_NAMES = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b")
_LLAMA3_NAMES = ("llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                 "dbrx", "smaug-bpe")
_LLAMA3_SPLIT_MERGING_NAMES = ("chatglm-bpe", "glm4")  # the Llama 3 split, merges not ignored
_QWEN2_NFC_NAMES = ("qwen2", "deepseek-r1-qwen")  # Qwen2's tokenizer.json also normalizes to NFC
_QWEN2_NAMES = ("kormo", "megrez", "stablelm2", "hunyuan", "grok-2")
_GPT4O_NAMES = ("gpt-4o", "llama4", "minimax-m2")

SUPPORTED_PRE_TOKENIZERS = ("default",) + (_GPT2_NAMES + _DIGITS_THEN_GPT2_NAMES + _LLAMA3_NAMES + _LLAMA3_SPLIT_MERGING_NAMES
                            + _QWEN2_NFC_NAMES + _QWEN2_NAMES + _GPT4O_NAMES + ("tekken",))


def pre_tokenizer_for(pre: str) -> tuple[Any, Any | None, bool]:
    """(pre_tokenizer, normalizer, ignore_merges) for a llama.cpp `tokenizer.ggml.pre` name."""
    gpt2_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in _GPT2_NAMES:
        return gpt2_regex, None, False
    if pre in _DIGITS_THEN_GPT2_NAMES:  # digits one by one, then the GPT-2 regex (SmolLM2's tokenizer.json)
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2_regex]), None, False

    def split_then_bytes(*patterns: str) -> Any:  # llama.cpp splits each piece by each regex in turn
        splits = [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in patterns]
        return pre_tokenizers.Sequence(splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                                          use_regex=False)])

    if pre == "default":  # also what llama.cpp uses when the name is missing or unknown to it
        return split_then_bytes(*_DEFAULT_SPLITS), None, False

    if pre in _LLAMA3_NAMES:
        return split_then_bytes(_LLAMA3_SPLIT), None, True  # llama.cpp's ignore_merges for this group
    if pre in _LLAMA3_SPLIT_MERGING_NAMES:
        return split_then_bytes(_LLAMA3_SPLIT), None, False
    if pre in _QWEN2_NFC_NAMES:
        return split_then_bytes(_QWEN2_SPLIT), normalizers.NFC(), False
    if pre in _QWEN2_NAMES:
        return split_then_bytes(_QWEN2_SPLIT), None, False
    if pre in _GPT4O_NAMES:
        return split_then_bytes(_GPT4O_SPLIT), None, False
    if pre == "tekken":
        return split_then_bytes(_TEKKEN_SPLIT), None, True
    raise ValueError(
        f"unsupported tokenizer pre-tokenizer {pre!r} in the GGUF (tokenizer.ggml.pre); llmchat supports "
        f"{', '.join(SUPPORTED_PRE_TOKENIZERS)}. Use the model's Hugging Face folder (with tokenizer.json) instead."
    )
