"""GGUF SentencePiece vocabularies (`tokenizer.ggml.model == "llama"`: Llama 2, Mistral, Phi-3, Gemma).

References: a slow llama.cpp-style SPM encoder (spm_reference.py) on a vocabulary trained in the test, and,
where the `sentencepiece` package is installed (a test aid, not a dependency), sentencepiece itself on a BPE
model it trains with byte fallback, exported to a GGUF the way llama.cpp's converter does.
"""
from __future__ import annotations

import io
import subprocess

import gguf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer

from spm_reference import BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, SlowSPM, train_vocab, write_spm_gguf
from test_tokenizer import FRAGMENTS, make_corpus, random_strings
from llmchat.core.text.prompt import chat_messages, prompt_ids_for
from llmchat.core.text.tokenizer import IncrementalDetokenizer, Tokenizer
from llmchat.core.weights.gguf_tokenizer import tokenizer_files_from_gguf

SPECIALS = {"<|im_start|>": CONTROL, "<|im_end|>": CONTROL, "<think>": USER_DEFINED, "<unused0>": UNUSED}
EDGES = ["", " ", "  ", "   hi", "hi   ", "a  b   c", "\n", "\n\n x\n", "\t\tindent", " \t \n ", "x\r\ny",
         "12345 678", "3.14", "中文字符测试", "😀 emoji 👩‍👩‍👧", "naïve café", "<s>", "</s>", "<unk>", "<|im_start|>",
         "a<|im_end|>b", "<|im_start|>user\nHi<|im_end|>\n", "<think>x</think>", " <think> y", "<unused0>",
         "\u2581literal", "\u00a0nbsp", "e\u0301"]


def corpus() -> list[str]:
    return EDGES + make_corpus(seed=11, num_docs=150) + random_strings(seed=12, num=150)


@pytest.fixture(scope="module")
def vocab() -> tuple[list[str], list[float], list[int]]:
    texts = [t for t in make_corpus(seed=10, num_docs=200) if not any(ord(c) > 0x2FFF for c in t)]  # no emoji
    return train_vocab(texts, num_merges=500, specials=SPECIALS)


def convert(tmp_path, vocab, name: str = "v.gguf", **kwargs) -> dict[str, str]:
    return tokenizer_files_from_gguf(gguf.GGUFReader(write_spm_gguf(tmp_path / name, *vocab, **kwargs)))


@pytest.fixture(scope="module")
def ours(vocab, tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_files(convert(tmp_path_factory.mktemp("spm"), vocab))


def test_vocabulary_and_flags(ours: Tokenizer, vocab) -> None:
    tokens, _, _ = vocab
    assert ours.vocab_size == len(tokens) and ours.vocab() == {t: i for i, t in enumerate(tokens)}
    assert (ours.bos_token_id, ours.eos_token_id, ours.add_bos_token) == (1, 2, True)
    assert ours.special_token_ids == {0, 1, 2, 3, 4}  # <unk> <s> </s> and the control tokens
    assert ours.encode("hi")[0] == 1 and ours.encode("hi", add_bos=False)[0] != 1
    assert {2, tokens.index("<|im_end|>")} <= ours.stop_token_ids


def test_ids_match_llama_cpp_style_reference(ours: Tokenizer, vocab) -> None:
    slow = SlowSPM(*vocab)
    for text in corpus():
        assert ours.encode(text, add_bos=False) == slow.encode(text), text
    # the prefix: at the start, even before a space, and after every special token
    assert "".join(ours.id_to_token(i) for i in ours.encode(" x", add_bos=False)) == "\u2581\u2581x"
    after = ours.encode("<|im_start|>x", add_bos=False)
    assert after[0] == 3 and "".join(ours.id_to_token(i) for i in after[1:]) == "\u2581x"


def test_control_tokens_stay_plain_text_when_not_parsed(ours: Tokenizer, vocab, tmp_path) -> None:
    """With special tokens not parsed (sentencepiece's view of user text), no merge may yield a control,
    unknown, unused or byte token; user-defined tokens are still matched whole, as llama.cpp does."""
    backend = HFTokenizer.from_str(convert(tmp_path, vocab)["tokenizer.json"])
    backend.encode_special_tokens = True
    slow = SlowSPM(*vocab)
    _, _, types = vocab
    for text in EDGES + [f"x{s}y" for s in SPECIALS]:
        ids = backend.encode(text, add_special_tokens=False).ids
        assert ids == slow.encode(text, parse_special=False), text
        assert not any(types[i] in (CONTROL, UNKNOWN, UNUSED) for i in ids), text
    assert backend.encode("<think>", add_special_tokens=False).ids == [vocab[0].index("<think>")]


def plain(text: str) -> str:
    """What decoding gives back: a literal "▁" in the text reads as the space it stands for."""
    return text.replace("\u2581", " ")


def test_decode_inverts_encode(ours: Tokenizer, vocab, tmp_path) -> None:
    backend = HFTokenizer.from_str(convert(tmp_path, vocab)["tokenizer.json"])
    backend.encode_special_tokens = True  # special-token text stays text, so the round trip is exact
    for text in corpus():
        if "<think>" in text:  # a user-defined token is still matched whole, and a space prefix follows it
            continue
        assert backend.decode(backend.encode(text, add_special_tokens=False).ids) == plain(text), text
        if not any(s in text for s in ("<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<think>")):
            assert ours.decode(ours.encode(text), skip_special_tokens=True) == plain(text), text
    # a parsed special token is followed by the space prefix, as in llama.cpp: the text gains that space
    assert ours.decode(ours.encode("a<|im_end|>b", add_bos=False)) == "a<|im_end|> b"


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_matches_reference_and_round_trips(ours: Tokenizer, vocab, text: str) -> None:
    ids = ours.encode(text, add_bos=False)
    assert ids == SlowSPM(*vocab).encode(text)
    if not any(s in text for s in ("<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<think>")):
        assert ours.decode(ids) == plain(text)


def test_streamed_text_equals_decode(ours: Tokenizer) -> None:
    for text in EDGES + FRAGMENTS[:30]:
        ids = ours.encode(text)
        detokenizer = IncrementalDetokenizer(ours, skip_special_tokens=True)
        deltas = [detokenizer.push(i) for i in ids] + [detokenizer.flush()]
        assert "".join(deltas) == ours.decode(ids, skip_special_tokens=True), text


def test_flags_absent_or_off(vocab, tmp_path) -> None:
    """No add_space_prefix key means on (llama.cpp's default); off means no "▁" in front and nothing stripped."""
    default = Tokenizer.from_files(convert(tmp_path, vocab, "a.gguf", add_space_prefix=None))
    off = Tokenizer.from_files(convert(tmp_path, vocab, "b.gguf", add_space_prefix=False, add_bos=False))
    slow_off = SlowSPM(*vocab, add_space_prefix=False)
    for text in EDGES:
        assert default.encode(text, add_bos=False) == SlowSPM(*vocab).encode(text), text
        assert off.encode(text) == slow_off.encode(text), text
        if "<" not in text:
            assert off.decode(off.encode(text)) == plain(text), text
    assert off.add_bos_token is False


def test_scores_are_required(vocab, tmp_path) -> None:
    tokens, _, types = vocab
    path = tmp_path / "no-scores.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    with pytest.raises(ValueError, match="tokenizer.ggml.scores"):
        tokenizer_files_from_gguf(gguf.GGUFReader(path))


# ----------------------------------------------------------------------------- sentencepiece itself


@pytest.fixture(scope="module")
def sentencepiece_model():
    spm = pytest.importorskip("sentencepiece", reason="sentencepiece (a test aid only) is not installed")
    texts = [t for t in make_corpus(seed=20, num_docs=400) if not any(ord(c) > 0x2FFF for c in t)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, model_type="bpe", vocab_size=1500, byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        split_digits=True, allow_whitespace_only_pieces=True, character_coverage=1.0, hard_vocab_limit=False,
        control_symbols=["<|im_start|>", "<|im_end|>"], unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def sentencepiece_vocab(sp) -> tuple[list[str], list[float], list[int]]:
    """The vocabulary as llama.cpp's converter writes it (convert_hf_to_gguf.py's _create_vocab_sentencepiece)."""
    def kind(i: int) -> int:
        return (UNKNOWN if sp.is_unknown(i) else CONTROL if sp.is_control(i) else UNUSED if sp.is_unused(i)
                else BYTE if sp.is_byte(i) else NORMAL)
    n = sp.get_piece_size()
    return [sp.id_to_piece(i) for i in range(n)], [sp.get_score(i) for i in range(n)], [kind(i) for i in range(n)]


def test_ids_match_sentencepiece(sentencepiece_model, tmp_path) -> None:
    sp = sentencepiece_model
    backend = HFTokenizer.from_str(convert(tmp_path, sentencepiece_vocab(sp))["tokenizer.json"])
    backend.encode_special_tokens = True  # sentencepiece reads control tokens in text as plain characters
    texts = corpus()
    mismatches = [t for t in texts if backend.encode(t, add_special_tokens=False).ids != sp.encode(t)]
    print(f"sentencepiece agreement: {len(texts) - len(mismatches)}/{len(texts)}")
    assert mismatches == []
    assert all(backend.decode(sp.encode(t)) == sp.decode(sp.encode(t)) == plain(t) for t in texts)


# ----------------------------------------------------------------------------- the whole GGUF path


def test_ask_on_a_gguf_with_a_sentencepiece_vocabulary(vocab, tmp_path, monkeypatch) -> None:
    """`llmchat ask --model tiny.gguf` converts the file (tokenizer included), encodes the prompt with BOS once
    and streams a reply equal to the in-process engine's greedy text (gibberish: random weights)."""
    from serve_helpers import llmchat_exe

    from llmchat.core.api.params import SamplingParams
    from llmchat.core.config import EngineConfig
    from llmchat.core.engine.engine import LLMEngine
    from llmchat.core.model.loader import load_model

    template = "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
    path = write_spm_gguf(tmp_path / "tiny.gguf", *vocab, model=True, template=template)
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(tmp_path / "cache"))
    question = "What is  the capital of France? 😀"
    done = subprocess.run([llmchat_exe(), "ask", "--model", str(path), "--temperature", "0", "--max-tokens", "10",
                           "--raw", question], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = load_model(path, weight_dtype="float32")
    tokenizer = loaded.tokenizer
    prompt = prompt_ids_for(tokenizer, chat_messages(question))
    assert prompt[0] == 1 and prompt.count(1) == 1 and prompt == tokenizer.encode(f"[INST] {question} [/INST]")
    assert prompt == [1] + SlowSPM(*vocab).encode(f"[INST] {question} [/INST]")
    engine = LLMEngine(loaded, EngineConfig(kv_cache_bytes=64 * loaded.config.kv_bytes_per_token(4) * 16))
    engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=10))
    finished = [e for _ in iter(lambda: engine.has_work, False) for e in engine.step() if hasattr(e, "output_ids")]
    ids = list(finished[0].output_ids)
    ends = [k for k, t in enumerate(ids) if t in tokenizer.stop_token_ids]
    assert ids[:1] != [2] and done.stdout.strip()  # a reply of some tokens, not an immediate end
    assert done.stdout == tokenizer.decode(ids[: ends[0]] if ends else ids, skip_special_tokens=True) + "\n"
