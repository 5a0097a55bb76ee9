"""Tokenizer, chat template and incremental detokenizer, checked against independent references.

References: transformers' own GGUF conversion of the default model (vocabulary, merges, special tokens,
chat template rendering), and a slow pure-Python byte-level BPE that splits text with llama.cpp's
regexes for each pre-tokenizer type.
"""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # no hub here: nothing in these tests may try the network
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import json
import random
import unicodedata
from pathlib import Path

import gguf
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from llmchat.core.weights.gguf_tokenizer import tokenizer_files_from_gguf
from llmchat.core.text.tokenizer import IncrementalDetokenizer, Tokenizer
from llmchat.core.text.prompt import prompt_ids_for

# ----------------------------------------------------------------------------- slow reference BPE


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHARS = bytes_to_unicode()
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# llama.cpp llama-vocab.cpp: the regex sequence of each LLAMA_VOCAB_PRE_TYPE
LLAMA_CPP_SPLITS = {
    "gpt2": [GPT2_REGEX],
    "smollm": [r"\p{N}", GPT2_REGEX],
    "llama-bpe": [
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ],
    "qwen2": [
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ],
}


class SlowBPE:
    """Obvious byte-level BPE: split special tokens, split by regexes, merge the lowest-ranked pair until none."""

    def __init__(self, tokens: list[str], merges: list[str], special: list[str], pre: str) -> None:
        self.vocab = {}
        for i, tok in enumerate(tokens):
            self.vocab.setdefault(tok, i)
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.special = regex.compile("|".join(regex.escape(s) for s in sorted(special, key=len, reverse=True)))
        self.splits = [regex.compile(p) for p in LLAMA_CPP_SPLITS[pre]]
        self.pre = pre

    def _split(self, text: str) -> list[str]:
        pieces = [text]
        for pattern in self.splits:
            out = []
            for piece in pieces:
                pos = 0
                for m in pattern.finditer(piece):
                    out += [piece[pos:m.start()], m.group()]
                    pos = m.end()
                out.append(piece[pos:])
            pieces = [p for p in out if p]
        return pieces

    def _bpe(self, word: str) -> list[int]:
        if self.pre == "llama-bpe" and word in self.vocab:  # llama.cpp's ignore_merges for Llama 3
            return [self.vocab[word]]
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 60), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 60:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return [self.vocab[p] for p in parts if p in self.vocab]  # no unknown token: a missing byte is dropped

    def encode(self, text: str) -> list[int]:
        ids, pos = [], 0
        chunks = []
        for m in self.special.finditer(text):
            chunks += [(text[pos:m.start()], False), (m.group(), True)]
            pos = m.end()
        chunks.append((text[pos:], False))
        for chunk, is_special in chunks:
            if is_special:
                ids.append(self.vocab[chunk])
                continue
            if self.pre == "qwen2":
                chunk = unicodedata.normalize("NFC", chunk)
            for piece in self._split(chunk):
                ids += self._bpe("".join(BYTE_CHARS[b] for b in piece.encode("utf-8")))
        return ids


# ----------------------------------------------------------------------------- corpus

FRAGMENTS = [
    "The quick brown fox jumps over the lazy dog.", "Don't stop; it's what WE'LL do, they'd said.",
    "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "if __name__ == '__main__':\n\tmain()", "<div class=\"x\">&amp;</div>", "SELECT * FROM t WHERE id=42;",
    "😀", "👩‍👩‍👧‍👦", "👍🏽", "🇫🇷🇯🇵", "❤️", "🧑‍💻 coding", "中文字符测试", "日本語のテキスト、カタカナ",
    "한국어 문장입니다", "مرحبا بالعالم", "Ελληνικά", "naïve café résumé", "e\u0301 combining", "ﬁ ligature",
    "0", "7", "42", "123456789", "3.14159", "1,000,000", "2024-01-31", "x1y22z333", "٣٤٥ ①②", "²³",
    " ", "  ", "    ", "\t", "\t\t", "\n", "\n\n\n", " \n ", "\r\n", "   \t \n", "\u00a0", "\u3000",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>", "<|im_sta", "<|im_end",
    "<file_sep>", "<|IM_START|>", "'s", "'S", "''", "...", "!!!", "$$", "->", "::", "==", "\\n", "\"quoted\"",
]


def make_corpus(seed: int, num_docs: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(num_docs):
        parts = [rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 10))]
        docs.append("".join(p + rng.choice(["", "", " ", "\n", "  ", "\t"]) for p in parts))
    return docs + FRAGMENTS


def random_strings(seed: int, num: int) -> list[str]:
    rng = random.Random(seed)
    pools = [
        [chr(c) for c in range(0x20, 0x7F)] + [" ", "\n", "\t", "\r"],
        [chr(c) for c in range(0x4E00, 0x4E80)] + [chr(c) for c in range(0x600, 0x660)],
        [chr(c) for c in range(0x1F300, 0x1F650)] + ["\u200d", "\ufe0f", "\U0001F3FD"],
        [chr(c) for c in range(0xA0, 0x250)] + [chr(c) for c in range(0x300, 0x370)],
    ]
    out = []
    for _ in range(num):
        chars = []
        for _ in range(rng.randint(0, 40)):
            c = chr(rng.randrange(0x110000)) if rng.random() < 0.05 else rng.choice(rng.choice(pools))
            # unassigned code points are left out: Python's `regex` knows a newer Unicode than the Rust side
            chars.append("?" if unicodedata.category(c) in ("Cn", "Cs") else c)
        out.append("".join(chars))
    return out


# SmolLM2's vocabulary lacks 21 of the 256 byte tokens (e.g. 0x04, 0xF1, 0xF2), and byte-level BPE without an
# unknown token drops such bytes, in Hugging Face's tokenizer as in ours: text round-trips minus those bytes.
MISSING_BYTES = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)}


def round_trip(text: str) -> str:
    return bytes(b for b in text.encode("utf-8") if b not in MISSING_BYTES).decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def reader(default_gguf: Path) -> gguf.GGUFReader:
    return gguf.GGUFReader(default_gguf)


@pytest.fixture(scope="module")
def gguf_files(reader: gguf.GGUFReader) -> dict[str, str]:
    return tokenizer_files_from_gguf(reader)


def write_folder(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def ours(gguf_files: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return Tokenizer.from_dir(write_folder(tmp_path_factory.mktemp("tok"), gguf_files))


@pytest.fixture(scope="module")
def reference(default_gguf: Path):
    """transformers' own tokenizer for the GGUF (it converts the file itself)."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(
        str(default_gguf.parent), gguf_file=default_gguf.name, local_files_only=True
    )


@pytest.fixture(scope="module")
def reference_smollm2(reference):
    """The transformers tokenizer with SmolLM2's published pre-tokenizer (Hub tokenizer.json: Digits(individual)
    then ByteLevel). transformers does not map llama.cpp's pre type "smollm" and falls back to plain GPT-2
    splitting, which differs on whitespace before digits ("a  1")."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import pre_tokenizers

    backend = HFTokenizer.from_str(reference.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    return backend


@pytest.fixture(scope="module")
def slow_bpe(reader: gguf.GGUFReader) -> SlowBPE:
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    special = [t for t, k in zip(tokens, types) if k == 3]
    return SlowBPE(tokens, reader.fields["tokenizer.ggml.merges"].contents(), special, "smollm")


# ----------------------------------------------------------------------------- identity


def test_special_ids_match_reference(ours: Tokenizer, reference) -> None:
    assert ours.vocab_size == len(reference) == 49152
    assert (ours.bos_token_id, ours.eos_token_id) == (reference.bos_token_id, reference.eos_token_id)
    assert ours.token_to_id("<|im_end|>") == reference.convert_tokens_to_ids("<|im_end|>") == ours.eos_token_id
    assert ours.stop_token_ids == {ours.eos_token_id, ours.token_to_id("<|endoftext|>")}
    assert ours.token_to_id("<|no such token|>") is None
    assert ours.add_bos_token is False and ours.encode("hi") == reference.encode("hi")  # no BOS, like the reference


def test_ids_match_transformers_on_corpus(ours: Tokenizer, reference, reference_smollm2) -> None:
    for text in make_corpus(seed=1, num_docs=300) + random_strings(seed=2, num=400):
        ids = ours.encode(text)
        assert ids == reference_smollm2.encode(text, add_special_tokens=False).ids, text
        if not any(unicodedata.category(c).startswith("N") for c in text):  # where transformers' split agrees
            assert ids == reference.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == round_trip(text)


def test_ids_match_llama_cpp_style_reference(ours: Tokenizer, slow_bpe: SlowBPE) -> None:
    assert ours.encode("a  1") == slow_bpe.encode("a  1")  # digits split first: "ĠĠ" then "1"
    for text in make_corpus(seed=3, num_docs=150) + random_strings(seed=4, num=150):
        assert ours.encode(text) == slow_bpe.encode(text), text


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60))
def test_ids_and_round_trip_on_any_text(ours: Tokenizer, reference_smollm2, text: str) -> None:
    ids = ours.encode(text)
    assert ids == reference_smollm2.encode(text, add_special_tokens=False).ids
    assert ours.decode(ids) == round_trip(text)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 49151), max_size=30), skip=st.booleans())
def test_decode_matches_reference_on_any_ids(ours: Tokenizer, reference, ids: list[int], skip: bool) -> None:
    assert ours.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


def test_missing_byte_tokens_are_the_ones_round_trip_drops(gguf_files: dict[str, str]) -> None:
    vocab = json.loads(gguf_files["tokenizer.json"])["model"]["vocab"]
    assert {b for b, c in BYTE_CHARS.items() if c not in vocab} == MISSING_BYTES


# ----------------------------------------------------------------------------- chat template

CHATS = {
    "no system": [{"role": "user", "content": "What is the capital of France?"}],
    "with system": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi 👋 <b>"}],
    "multi-turn": [
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another, in 中文?\n\n  Thanks"},
    ],
}


@pytest.mark.parametrize("name", sorted(CHATS))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(
    ours: Tokenizer, reference, reference_smollm2, name: str, add_generation_prompt: bool
) -> None:
    messages = CHATS[name]
    text = ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert text == expected
    assert text.endswith("<|im_start|>assistant\n") == add_generation_prompt
    assert ("You are a helpful AI assistant named SmolLM" in text) == (messages[0]["role"] != "system")
    ids = ours.encode(text, add_bos=False)
    if add_generation_prompt:  # the one prompt builder gives the same ids (this template writes no BOS)
        assert prompt_ids_for(ours, messages) == ids
    assert ids == reference_smollm2.encode(expected, add_special_tokens=False).ids
    assert ids[0] == ours.token_to_id("<|im_start|>") and ids.count(ours.eos_token_id) == len(messages) + (
        messages[0]["role"] != "system")


def folder_with_template(tmp_path: Path, gguf_files: dict[str, str], template) -> Path:
    config = json.loads(gguf_files["tokenizer_config.json"]) | {"chat_template": template}
    return write_folder(tmp_path, gguf_files | {"tokenizer_config.json": json.dumps(config)})


@pytest.mark.parametrize("template", [
    "{{ ''.__class__.__mro__ }}",
    "{{ messages.__class__.__base__.__subclasses__() }}",
    "{% for m in messages %}{{ '{0.__class__.__init__.__globals__}'.format(m) }}{% endfor %}",
    "{% set ns = namespace(_private=1) %}{{ ns }}",
    "{{ messages.append(messages[0]) }}",  # the sandbox is immutable
])
def test_sandbox_refuses_unsafe_templates(tmp_path: Path, gguf_files: dict[str, str], template: str) -> None:
    tokenizer = Tokenizer.from_dir(folder_with_template(tmp_path, gguf_files, template))
    with pytest.raises(ValueError, match="chat template"):
        tokenizer.apply_chat_template(CHATS["no system"])


def test_bad_templates_raise_clear_errors(tmp_path: Path, gguf_files: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="not valid Jinja"):
        Tokenizer.from_dir(folder_with_template(tmp_path / "a", gguf_files, "{% for m in messages %}"))
    raising = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('needs a system message') }}{% endif %}"
    tokenizer = Tokenizer.from_dir(folder_with_template(tmp_path / "b", gguf_files, raising))
    with pytest.raises(ValueError, match="needs a system message"):
        tokenizer.apply_chat_template(CHATS["no system"])
    with pytest.raises(ValueError, match="no chat template"):
        Tokenizer.from_dir(folder_with_template(tmp_path / "c", gguf_files, None)).apply_chat_template([])


def test_template_sources_and_globals(tmp_path: Path, gguf_files: dict[str, str]) -> None:
    named = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ bos_token }}|{{ "
             "messages | tojson }}|{{ strftime_now('%Y') | length }}{% for m in messages %}{% break %}{% endfor %}"}]
    tokenizer = Tokenizer.from_dir(folder_with_template(tmp_path / "a", gguf_files, named))
    assert tokenizer.apply_chat_template([{"role": "user", "content": "é"}]) == (
        '<|im_start|>|[{"role": "user", "content": "é"}]|4')
    folder = folder_with_template(tmp_path / "b", gguf_files, "from config")
    (folder / "chat_template.jinja").write_text("{{ eos_token }}{{ add_generation_prompt }}")
    assert Tokenizer.from_dir(folder).apply_chat_template([{"role": "user", "content": "x"}]) == "<|im_end|>True"


# ----------------------------------------------------------------------------- incremental detokenizer


def stream(tokenizer: Tokenizer, ids: list[int], skip_special_tokens: bool) -> list[str]:
    detokenizer = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip_special_tokens)
    return [detokenizer.push(i) for i in ids] + [detokenizer.flush()]


def test_detokenizer_holds_a_char_split_over_byte_tokens(ours: Tokenizer) -> None:
    byte_ids = [ours.token_to_id(BYTE_CHARS[b]) for b in "😀".encode("utf-8")]  # one 4-byte char, 4 tokens
    ids = ours.encode("Hi ") + byte_ids + ours.encode(" done")
    deltas = stream(ours, ids, skip_special_tokens=True)
    assert deltas[:2] == ["Hi", " "] and deltas[2:5] == ["", "", ""] and deltas[5] == "😀"
    assert "".join(deltas) == "Hi 😀 done" == ours.decode(ids)


def test_detokenizer_on_multibyte_text(ours: Tokenizer) -> None:
    text = "naïve café 中文字符 😀 👩‍👩‍👧 🇫🇷 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ١٢٣ e\u0301"
    ids = ours.encode(text)
    assert any("\ufffd" in ours.decode([i]) for i in ids)  # some tokens carry only part of a character
    deltas = stream(ours, ids, skip_special_tokens=True)
    assert all("\ufffd" not in d for d in deltas) and "".join(deltas) == text
    assert "" in deltas  # it waited for the rest of a character at least once


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40), specials=st.lists(st.sampled_from([0, 1, 2, 5]), max_size=3),
       seed=st.integers(0, 2**32 - 1), skip=st.booleans())
def test_detokenizer_deltas_concatenate_to_decode(ours: Tokenizer, text: str, specials: list[int], seed: int,
                                                  skip: bool) -> None:
    ids = ours.encode(text)
    for special_id in specials:  # special tokens anywhere, also between the byte tokens of one character
        ids.insert(random.Random(seed + special_id).randint(0, len(ids)), special_id)
    deltas = stream(ours, ids, skip_special_tokens=skip)
    assert "".join(deltas) == ours.decode(ids, skip_special_tokens=skip)
    if "\ufffd" not in ours.decode(ids, skip_special_tokens=skip):  # valid text never emits a replacement char
        assert all("\ufffd" not in d for d in deltas)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 49151), max_size=30))
def test_detokenizer_on_arbitrary_ids(ours: Tokenizer, ids: list[int]) -> None:
    """Random ids make invalid UTF-8 too: deltas still add up to decode, so no U+FFFD comes out early."""
    assert "".join(stream(ours, ids, skip_special_tokens=True)) == ours.decode(ids, skip_special_tokens=True)


# ----------------------------------------------------------------------------- other pre-tokenizers


def write_tiny_gguf(path: Path, model: str, pre: str, merges: list[str]) -> gguf.GGUFReader:
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"] + list(BYTE_CHARS.values())
    for merge in merges:
        tokens.append(merge.replace(" ", ""))
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3, 4] + [1] * (len(tokens) - 4))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_chat_template("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf.GGUFReader(path)


def tiny_merges(rng: random.Random) -> list[str]:
    """Merges of frequent pairs in the corpus, so that the pre-tokenizer's splits decide the result."""
    merges, known = [], set(BYTE_CHARS.values())
    for text in make_corpus(seed=5, num_docs=40):
        chars = "".join(BYTE_CHARS[b] for b in text.encode("utf-8"))
        for i in range(0, len(chars) - 2, rng.randint(1, 3)):
            a, b = chars[i:i + 1], chars[i + 1:i + 1 + rng.randint(1, 2)]
            if a in known and b in known and a + b not in known:
                merges.append(f"{a} {b}")
                known.add(a + b)
    return merges[:400]


@pytest.mark.parametrize("pre", ["gpt2", "smollm", "llama-bpe", "qwen2"])
def test_pre_tokenizers_follow_llama_cpp_regexes(tmp_path: Path, pre: str) -> None:
    merges = tiny_merges(random.Random(0))
    reader = write_tiny_gguf(tmp_path / "tiny.gguf", "gpt2", pre, merges)
    tokenizer = Tokenizer.from_dir(write_folder(tmp_path / "tok", tokenizer_files_from_gguf(reader)))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    slow = SlowBPE(tokens, merges, tokens[:3] + ["<think>"], pre)
    bos = [tokenizer.bos_token_id]
    for text in make_corpus(seed=6, num_docs=60) + random_strings(seed=7, num=60) + ["12345 <think>x"]:
        assert tokenizer.encode(text) == bos + slow.encode(text), (pre, text)
        assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=True) == (
            unicodedata.normalize("NFC", text) if pre == "qwen2" else text).replace("<|im_start|>", "").replace(
            "<|im_end|>", "").replace("<|endoftext|>", "")
    # the template writes {{ bos_token }} and add_bos_token is true: the prompt still has one BOS
    assert prompt_ids_for(tokenizer, [{"role": "user", "content": "a"}]) == bos + slow.encode("a")
    assert tokenizer.stop_token_ids == {2, 0}


@pytest.mark.parametrize(("model", "pre", "message"), [
    ("t5", "default", "unsupported tokenizer 't5'"),
    ("gpt2", "mystery-pre", "unsupported tokenizer pre-tokenizer 'mystery-pre'"),
])
def test_unsupported_gguf_tokenizers_raise(tmp_path: Path, model: str, pre: str, message: str) -> None:
    reader = write_tiny_gguf(tmp_path / "tiny.gguf", model, pre, [])
    with pytest.raises(ValueError, match=message):
        tokenizer_files_from_gguf(reader)


def test_converted_folder_loads_in_transformers_with_same_ids(ours: Tokenizer, tmp_path: Path,
                                                             gguf_files: dict[str, str]) -> None:
    transformers = pytest.importorskip("transformers")
    folder = write_folder(tmp_path / "converted", gguf_files)
    loaded = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert (loaded.bos_token, loaded.eos_token) == ("<|im_start|>", "<|im_end|>")
    for text in make_corpus(seed=8, num_docs=50):
        assert loaded.encode(text) == ours.encode(text), text
    assert loaded.apply_chat_template(CHATS["multi-turn"], tokenize=False, add_generation_prompt=True) == (
        ours.apply_chat_template(CHATS["multi-turn"]))
