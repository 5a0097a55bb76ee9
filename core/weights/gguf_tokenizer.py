"""GGUF tokenizer metadata -> the Hugging Face files `tokenizer.json` and `tokenizer_config.json`.

A GGUF carries no tokenizer.json: `tokenizer_files_from_gguf` rebuilds the Hugging Face files from the
llama.cpp metadata (vocabulary, merges, token types, pre-tokenizer name), so a converted model folder
looks like one downloaded from the Hub and `Tokenizer.from_dir` reads either kind.
"""
from __future__ import annotations

import json
from typing import Any

from tokenizers import AddedToken, decoders, models, processors
from tokenizers import Tokenizer as HFTokenizer

from .gguf_meta import gguf_value
from .gguf_pre_tokenizers import pre_tokenizer_for
from .gguf_spm_tokenizer import spm_backend

_GGUF_UNKNOWN, _GGUF_CONTROL, _GGUF_USER_DEFINED = 2, 3, 4  # llama.cpp token types (see gguf_spm_tokenizer)


def tokenizer_files_from_gguf(reader: Any) -> dict[str, str]:
    """`{"tokenizer.json": ..., "tokenizer_config.json": ...}` rebuilt from a GGUF's tokenizer metadata.

    `reader` is a `gguf.GGUFReader`. Byte-level BPE (`tokenizer.ggml.model == "gpt2"`, see gguf_pre_tokenizers)
    and SentencePiece (`"llama"`, see gguf_spm_tokenizer) vocabularies are supported.
    """
    kind = gguf_value(reader, "tokenizer.ggml.model")
    if kind not in ("gpt2", "llama"):
        raise ValueError(
            f"unsupported tokenizer {kind!r} in the GGUF (tokenizer.ggml.model); llmchat reads byte-level BPE "
            "('gpt2') and SentencePiece ('llama') vocabularies. Use the model's Hugging Face folder (with "
            "tokenizer.json) instead."
        )
    tokens: list[str] = gguf_value(reader, "tokenizer.ggml.tokens")
    token_types: list[int] = gguf_value(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)  # a repeated spelling keeps its first id, as llama.cpp's text->id map does
    spm = kind == "llama"
    backend = spm_backend(reader, tokens, token_types, vocab) if spm else _byte_level_backend(reader, vocab)
    special_types = (_GGUF_CONTROL, _GGUF_UNKNOWN) if spm else (_GGUF_CONTROL,)  # llama.cpp matches <unk> whole

    def whole(token_type: int) -> list[AddedToken]:  # added tokens keep their vocabulary id (first spelling only)
        return [
            AddedToken(tok, special=token_type in special_types, normalized=False)
            for i, (tok, kind_) in enumerate(zip(tokens, token_types))
            if kind_ == token_type and vocab[tok] == i
        ]

    specials = [t for token_type in special_types for t in whole(token_type)]
    backend.add_special_tokens(specials)
    backend.add_tokens(whole(_GGUF_USER_DEFINED))
    assert backend.get_vocab_size(with_added_tokens=True) == len(vocab), "added tokens must reuse vocabulary ids"

    defaults = {"bos_token_id": 1, "eos_token_id": 2, "unknown_token_id": 0} if spm else {}  # llama.cpp's, for SPM

    def token_at(key: str) -> str | None:
        index = gguf_value(reader, f"tokenizer.ggml.{key}", defaults.get(key))
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    # llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise, to a byte-level one not
    bos, add_bos = token_at("bos_token_id"), bool(gguf_value(reader, "tokenizer.ggml.add_bos_token", spm))
    if add_bos and bos is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
    elif not spm:
        backend.post_processor = processors.ByteLevel(trim_offsets=False)

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": bool(gguf_value(reader, "tokenizer.ggml.add_eos_token", False)),
        "bos_token": bos,
        "eos_token": token_at("eos_token_id"),
        "unk_token": token_at("unknown_token_id"),
        "pad_token": token_at("padding_token_id"),
        "additional_special_tokens": [t.content for t in specials],
        "clean_up_tokenization_spaces": False,
        "chat_template": _gguf_chat_template(reader),
    }
    return {
        "tokenizer.json": backend.to_str(pretty=False),
        "tokenizer_config.json": json.dumps(config, ensure_ascii=False, indent=2),
    }


def _byte_level_backend(reader: Any, vocab: dict[str, int]) -> HFTokenizer:
    """GPT-2 style BPE over bytes spelled as printable characters, with the file's merges and pre-tokenizer."""
    merges: list[str] = gguf_value(reader, "tokenizer.ggml.merges") or []
    pre_tokenizer, normalizer, ignore_merges = pre_tokenizer_for(gguf_value(reader, "tokenizer.ggml.pre", "default"))
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=merge_pairs, ignore_merges=ignore_merges, fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.decoder = decoders.ByteLevel()
    return backend


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
