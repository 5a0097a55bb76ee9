"""llama.cpp's `tokenizer.ggml.pre` names beyond the ones test_tokenizer checks: each one splits text as the regexes
of its llama.cpp group do (a slow byte-level BPE over Python's `regex` module is the reference)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import regex

from test_tokenizer import (GPT2_REGEX, LLAMA_CPP_SPLITS, SlowBPE, make_corpus, random_strings, tiny_merges,
                            write_folder, write_tiny_gguf)
from llmchat.core.text.tokenizer import Tokenizer
from llmchat.core.weights.gguf_pre_tokenizers import SUPPORTED_PRE_TOKENIZERS
from llmchat.core.weights.gguf_tokenizer import tokenizer_files_from_gguf

# llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_DEFAULT: four regexes, each splitting the pieces of the one before
DEFAULT_SPLITS = [r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]"]
# the models' own tokenizer.json regexes (llama.cpp rewrites these case classes for its own regex engine)
GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# name -> (regexes, ignore_merges, NFC first)
CASES = {
    "default": (DEFAULT_SPLITS, False, False),
    "phi-2": (LLAMA_CPP_SPLITS["gpt2"], False, False),
    "command-r": (LLAMA_CPP_SPLITS["smollm"], False, False),
    "falcon3": (LLAMA_CPP_SPLITS["llama-bpe"], True, False),
    "chatglm-bpe": (LLAMA_CPP_SPLITS["llama-bpe"], False, False),
    "deepseek-r1-qwen": (LLAMA_CPP_SPLITS["qwen2"], False, True),
    "stablelm2": (LLAMA_CPP_SPLITS["qwen2"], False, False),
    "gpt-4o": ([GPT4O], False, False),
    "tekken": ([TEKKEN], True, False),
}


def reference(tokens: list[str], merges: list[str], splits: list[str], ignore_merges: bool, nfc: bool) -> SlowBPE:
    slow = SlowBPE(tokens, merges, tokens[:3] + ["<think>"], "gpt2")
    slow.splits = [regex.compile(p) for p in splits]
    slow.pre = "llama-bpe" if ignore_merges else "qwen2" if nfc else "gpt2"  # SlowBPE's switches for these rules
    assert not (ignore_merges and nfc)
    return slow


@pytest.mark.parametrize("pre", sorted(CASES))
def test_more_pre_tokenizers_follow_llama_cpp_groups(tmp_path: Path, pre: str) -> None:
    merges = tiny_merges(random.Random(0))
    reader = write_tiny_gguf(tmp_path / "tiny.gguf", "gpt2", pre, merges)
    tokenizer = Tokenizer.from_dir(write_folder(tmp_path / "tok", tokenizer_files_from_gguf(reader)))
    slow = reference(reader.fields["tokenizer.ggml.tokens"].contents(), merges, *CASES[pre])
    for text in make_corpus(seed=6, num_docs=60) + random_strings(seed=7, num=60) + ["12345 <think>x", "a+b=<c>|d"]:
        assert tokenizer.encode(text, add_bos=False) == slow.encode(text), (pre, text)


def test_every_supported_name_builds() -> None:
    """Each name the error message offers is one the converter accepts (no name listed but unmapped)."""
    from llmchat.core.weights.gguf_pre_tokenizers import pre_tokenizer_for

    for name in SUPPORTED_PRE_TOKENIZERS:
        assert pre_tokenizer_for(name)[0] is not None
