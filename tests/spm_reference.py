"""Test helpers for GGUF SentencePiece vocabularies: a slow llama.cpp-style SPM encoder (the reference the fast
Hugging Face conversion is checked against), a tiny vocabulary trained here by score-ranked pair merging, and a
GGUF writer for such a vocabulary (optionally with a tiny random llama model around it).

The reference follows llama.cpp's llm_tokenizer_spm_session: special tokens are cut out of the text first
(longest first); each stretch of text between them gets a " " in front (add_space_prefix), spaces become "▁",
the text is split into characters, and the adjacent pair that makes the best-scoring token merges (equal
scores: the leftmost) until none does; a symbol that is no token comes out as its <0xNN> byte tokens.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import gguf
import numpy as np

SPACE = "\u2581"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class SlowSPM:
    def __init__(self, tokens: list[str], scores: list[float], types: list[int], add_space_prefix: bool = True):
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.scores, self.types, self.add_space_prefix = scores, types, add_space_prefix
        self.mergeable = {t for t, i in self.ids.items() if types[i] in (NORMAL, USER_DEFINED)}
        whole = [t for t, i in self.ids.items() if types[i] in (CONTROL, UNKNOWN, USER_DEFINED)]
        self.whole = sorted(whole, key=len, reverse=True)

    def _pieces(self, text: str, parse_special: bool) -> list[tuple[str, bool]]:
        """(text, is_token) pieces: every special token found in the text, longest first, then the rest."""
        pieces = [(text, False)]
        for token in self.whole if parse_special else [t for t in self.whole if self.types[self.ids[t]] == 4]:
            out = []
            for piece, is_token in pieces:
                if is_token:
                    out.append((piece, True))
                    continue
                parts = piece.split(token)
                for k, part in enumerate(parts):
                    if k:
                        out.append((token, True))
                    if part:
                        out.append((part, False))
            pieces = out
        return pieces

    def _merge(self, text: str) -> list[int]:
        symbols = list(text)
        while True:
            best = None
            for i in range(len(symbols) - 1):
                joined = symbols[i] + symbols[i + 1]
                if joined in self.mergeable:
                    score = self.scores[self.ids[joined]]
                    if best is None or score > best[0]:
                        best = (score, i)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
        ids = []
        for s in symbols:
            ids += [self.ids[s]] if s in self.ids else [self.ids[f"<0x{b:02X}>"] for b in s.encode("utf-8")]
        return ids

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        ids, prev_special = [], True
        for piece, is_token in self._pieces(text, parse_special):
            if is_token:
                ids.append(self.ids[piece])
            else:
                prefix = " " if self.add_space_prefix and prev_special else ""
                ids += self._merge((prefix + piece).replace(" ", SPACE))
            prev_special = is_token
        return ids


def train_vocab(texts: list[str], num_merges: int, specials: dict[str, int]) -> tuple[list[str], list[float],
                                                                                      list[int]]:
    """A sentencepiece-shaped vocabulary: <unk> <s> </s>, the given special tokens, 256 byte tokens, merged
    pieces (score -rank, learned within "▁"-led words as sentencepiece does) and single characters."""
    words = Counter()
    for text in texts:
        for word in (" " + text).replace(" ", SPACE).split(SPACE):
            words[SPACE + word] += 1
    words = {tuple(w): n for w, n in words.items()}
    merged: list[str] = []
    for _ in range(num_merges):
        pairs = Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merged.append(a + b)
        new = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + n
        words = new
    chars = sorted({c for w in words for s in w for c in s})
    tokens = ["<unk>", "<s>", "</s>", *specials, *[f"<0x{b:02X}>" for b in range(256)]]
    types = [UNKNOWN, CONTROL, CONTROL, *specials.values(), *[BYTE] * 256]
    scores = [0.0] * len(tokens)
    for rank, piece in enumerate(dict.fromkeys(merged)):
        if piece not in tokens:
            tokens.append(piece), types.append(NORMAL), scores.append(-float(rank))
    for k, c in enumerate(c for c in chars if c not in tokens):
        tokens.append(c), types.append(NORMAL), scores.append(-float(len(merged) + k))
    return tokens, scores, types


def write_spm_gguf(path: Path, tokens: list[str], scores: list[float], types: list[int], *, add_bos: bool = True,
                   add_space_prefix: bool | None = True, model: bool = False, template: str | None = None) -> Path:
    """A GGUF with this vocabulary; `model`: with a 2-layer llama of random F32 weights, for `llmchat ask`."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(add_bos)
    if add_space_prefix is not None:
        writer.add_add_space_prefix(add_space_prefix)
    if template is not None:
        writer.add_chat_template(template)
    if model:
        hidden, ffn, heads, kv_heads, rng = 32, 64, 4, 2, np.random.default_rng(0)
        for key, value in [("block_count", 2), ("context_length", 256), ("embedding_length", hidden),
                           ("feed_forward_length", ffn), ("head_count", heads), ("head_count_kv", kv_heads)]:
            getattr(writer, f"add_{key}")(value)
        writer.add_rope_freq_base(10000.0)
        writer.add_layer_norm_rms_eps(1e-5)
        shapes = {"token_embd": (len(tokens), hidden), "output_norm": (hidden,)}
        for i in range(2):
            shapes |= {f"blk.{i}.attn_norm": (hidden,), f"blk.{i}.ffn_norm": (hidden,),
                       f"blk.{i}.attn_q": (hidden, hidden), f"blk.{i}.attn_k": (hidden * kv_heads // heads, hidden),
                       f"blk.{i}.attn_v": (hidden * kv_heads // heads, hidden), f"blk.{i}.attn_output": (hidden, hidden),
                       f"blk.{i}.ffn_gate": (ffn, hidden), f"blk.{i}.ffn_up": (ffn, hidden),
                       f"blk.{i}.ffn_down": (hidden, ffn)}
        for name, shape in shapes.items():
            w = np.ones(shape, np.float32) if len(shape) == 1 else rng.standard_normal(shape).astype(np.float32)
            writer.add_tensor(name + ".weight", w * (1.0 if len(shape) == 1 else 0.5))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
