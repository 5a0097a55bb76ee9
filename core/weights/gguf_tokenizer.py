"""GGUF tokenizer metadata -> the Hugging Face files `tokenizer.json` and `tokenizer_config.json`.

A GGUF carries no tokenizer.json: `tokenizer_files_from_gguf` rebuilds the Hugging Face files from the
llama.cpp metadata (vocabulary, merges, token types, pre-tokenizer name), so a converted model folder
looks like one downloaded from the Hub and `Tokenizer.from_dir` reads either kind.
"""
from __future__ import annotations

import json
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from .gguf_meta import gguf_value

_GGUF_CONTROL = 3  # llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
_GGUF_USER_DEFINED = 4

# Llama 3 (llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3) and Qwen2 split patterns, as in their tokenizer.json files.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _pre_tokenizer_for(pre: str) -> tuple[Any, Any | None, bool]:
    """(pre_tokenizer, normalizer, ignore_merges) for a llama.cpp `tokenizer.ggml.pre` name."""
    gpt2_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in ("gpt2", "gpt-2", "default"):
        return gpt2_regex, None, False
    if pre in ("smollm", "starcoder", "refact"):  # digits one by one, then the GPT-2 regex (SmolLM2's tokenizer.json)
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2_regex]), None, False
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)
    if pre in ("llama-bpe", "llama3", "llama-v3"):
        split = pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False)
        return pre_tokenizers.Sequence([split, byte_level]), None, True
    if pre == "qwen2":
        split = pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False)
        return pre_tokenizers.Sequence([split, byte_level]), normalizers.NFC(), False
    raise ValueError(
        f"unsupported tokenizer pre-tokenizer {pre!r} in the GGUF (tokenizer.ggml.pre); llmchat supports "
        "smollm, starcoder, refact, gpt2/default, llama-bpe, qwen2. Use the model's Hugging Face folder "
        "(with tokenizer.json) instead."
    )


def tokenizer_files_from_gguf(reader: Any) -> dict[str, str]:
    """`{"tokenizer.json": ..., "tokenizer_config.json": ...}` rebuilt from a GGUF's tokenizer metadata.

    `reader` is a `gguf.GGUFReader`. Only byte-level BPE (`tokenizer.ggml.model == "gpt2"`) is supported.
    """
    kind = gguf_value(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"unsupported tokenizer {kind!r} in the GGUF (tokenizer.ggml.model); llmchat reads byte-level BPE "
            "('gpt2') vocabularies only. Use the model's Hugging Face folder (with tokenizer.json) instead."
        )
    tokens: list[str] = gguf_value(reader, "tokenizer.ggml.tokens")
    token_types: list[int] = gguf_value(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    merges: list[str] = gguf_value(reader, "tokenizer.ggml.merges") or []
    pre = gguf_value(reader, "tokenizer.ggml.pre", "default")
    pre_tokenizer, normalizer, ignore_merges = _pre_tokenizer_for(pre)

    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)  # a repeated spelling keeps its first id, as llama.cpp's text->id map does
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=merge_pairs, ignore_merges=ignore_merges, fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.decoder = decoders.ByteLevel()

    def whole(token_type: int) -> list[AddedToken]:  # added tokens keep their vocabulary id (first spelling only)
        return [
            AddedToken(tok, special=token_type == _GGUF_CONTROL, normalized=False)
            for i, (tok, kind_) in enumerate(zip(tokens, token_types))
            if kind_ == token_type and vocab[tok] == i
        ]

    backend.add_special_tokens(whole(_GGUF_CONTROL))
    backend.add_tokens(whole(_GGUF_USER_DEFINED))
    assert backend.get_vocab_size(with_added_tokens=True) == len(vocab), "added tokens must reuse vocabulary ids"

    def token_at(key: str) -> str | None:
        index = gguf_value(reader, f"tokenizer.ggml.{key}")
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    bos, add_bos = token_at("bos_token_id"), bool(gguf_value(reader, "tokenizer.ggml.add_bos_token", False))
    if add_bos and bos is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
    else:
        backend.post_processor = processors.ByteLevel(trim_offsets=False)

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": bool(gguf_value(reader, "tokenizer.ggml.add_eos_token", False)),
        "bos_token": bos,
        "eos_token": token_at("eos_token_id"),
        "unk_token": token_at("unknown_token_id"),
        "pad_token": token_at("padding_token_id"),
        "additional_special_tokens": [t.content for t in whole(_GGUF_CONTROL)],
        "clean_up_tokenization_spaces": False,
        "chat_template": _gguf_chat_template(reader),
    }
    return {
        "tokenizer.json": backend.to_str(pretty=False),
        "tokenizer_config.json": json.dumps(config, ensure_ascii=False, indent=2),
    }


def _gguf_chat_template(reader: Any) -> str | list[dict[str, str]] | None:
    """The default template, or a list of named ones when the file has `tokenizer.chat_template.<name>` too."""
    default = gguf_value(reader, "tokenizer.chat_template")
    prefix = "tokenizer.chat_template."
    named = [
        {"name": key[len(prefix):], "template": gguf_value(reader, key)}
        for key in reader.fields
        if key.startswith(prefix) and key != "tokenizer.chat_template.names"
    ]
    if not named:
        return default
    return ([{"name": "default", "template": default}] if default is not None else []) + named
