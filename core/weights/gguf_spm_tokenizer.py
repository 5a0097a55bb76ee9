"""A GGUF SentencePiece vocabulary (`tokenizer.ggml.model == "llama"`: Llama 2, Mistral, Phi-3, Gemma) as a
Hugging Face `tokenizers` BPE model that encodes as llama.cpp's SPM tokenizer does.

llama.cpp (and sentencepiece's BPE) encodes a piece of text like this: spaces become "▁", a "▁" goes in
front when `tokenizer.ggml.add_space_prefix` says so (at the start and after every special token), the text
is cut into UTF-8 characters, and the adjacent pair whose concatenation is a token with the highest score
merges, again and again (equal scores: the leftmost pair); a character left over that is no token becomes its
`<0xNN>` byte tokens. A Hugging Face BPE model does the same with ranked merges, so the merges are the scores
written out: every way to cut a token in two known halves, best score first. transformers builds GGUF
sentencepiece tokenizers the same way (`generate_merges`); this file writes its own, where the space prefix is
a normalizer, not `Metaspace`, because llama.cpp adds "▁" even where the text already starts with a space
(Metaspace does not) and after every special token (Metaspace only at the very start).

One case a ranked list cannot express: two different tokens with the same score. llama.cpp then merges the
leftmost pair, the ranks here the token listed first; sentencepiece-trained BPE vocabularies give every
merged piece its own score, so this only shows in hand-edited or re-scored files.

Tokens a merge may produce are those sentencepiece lets it (normal and user-defined ones); control, unknown,
unused and byte tokens never come out of plain text. Control and unknown tokens become special added tokens,
user-defined ones plain added tokens, as in the byte-level case.
"""
from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers

from .gguf_meta import gguf_value

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # llama.cpp's token types
_NEVER_MERGED = {UNKNOWN, CONTROL, UNUSED, BYTE}
SPACE = "\u2581"  # "▁", sentencepiece's visible space


def spm_merges(tokens: list[str], scores: list[float], token_types: list[int]) -> list[tuple[str, str]]:
    """The BPE merges that replay llama.cpp's highest-score-first pair merging over these tokens.

    A merge (left, right) exists for every token a merge may produce and every cut of it into two halves that
    can be symbols themselves (a token a merge may produce, or a single character of the vocabulary). Ranks
    follow the score of the merged token, best first; ties keep the vocabulary order.
    """
    vocab = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    mergeable = {t for t, i in vocab.items() if token_types[i] not in _NEVER_MERGED}
    symbols = mergeable | {t for t in vocab if len(t) == 1}
    ranked: list[tuple[float, int, int, str, str]] = []
    for token in mergeable:
        index = vocab[token]
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in symbols and right in symbols:
                ranked.append((-scores[index], index, cut, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]


def spm_backend(reader: Any, tokens: list[str], token_types: list[int], vocab: dict[str, int]) -> HFTokenizer:
    """The BPE model, normalizer and decoder for a GGUF sentencepiece vocabulary (added tokens: the caller)."""
    scores = gguf_value(reader, "tokenizer.ggml.scores")
    if scores is None or len(scores) != len(tokens):
        raise ValueError("the GGUF's sentencepiece vocabulary has no tokenizer.ggml.scores for each token; "
                         "use the model's Hugging Face folder (with tokenizer.json) instead")
    scores = [float(s) for s in scores]
    has_bytes = all(f"<0x{b:02X}>" in vocab for b in range(256))
    unk_id = gguf_value(reader, "tokenizer.ggml.unknown_token_id", 0)  # llama.cpp's default for this vocabulary
    unk = tokens[unk_id] if unk_id is not None and 0 <= unk_id < len(tokens) else None
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=spm_merges(tokens, scores, token_types), unk_token=unk,
                                     fuse_unk=True, byte_fallback=has_bytes))
    space_prefix = bool(gguf_value(reader, "tokenizer.ggml.add_space_prefix", True))  # llama.cpp's default
    escape = normalizers.Replace(" ", SPACE)  # only U+0020, as llama_escape_whitespace: tabs and newlines stay
    # The normalizer runs on each stretch of text between added tokens, so the prefix also follows a special
    # token, as llama.cpp's is_prev_special rule has it; Prepend leaves an empty stretch empty.
    backend.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), escape]) if space_prefix else escape
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if space_prefix:  # the prefix the encoder added is not part of the text
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    backend.decoder = decoders.Sequence(steps)
    return backend
