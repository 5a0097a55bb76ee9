"""The think-tag splitter (core/text/reasoning.py): streamed deltas give what the whole string gives."""
from hypothesis import given, settings, strategies as st

from llmchat.core.text.reasoning import (CLOSE, OPEN, ReasoningSplitter, ReasoningTagger, opens_reasoning,
                                         pieces, split_reasoning, starts_inside)


def merged(items):
    out = []
    for kind, text in items:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


def streamed(deltas, inside=False):
    splitter = ReasoningSplitter(inside)
    out = []
    for d in deltas:
        out += splitter.feed(d)
    return merged(out + splitter.flush())


REPLY = f"{OPEN}\nLet me think: 2+2.\n{CLOSE}\n\nIt is 4."


def test_whole_reply():
    assert split_reasoning(REPLY) == ("\nLet me think: 2+2.\n", "\n\nIt is 4.")
    assert list(pieces(REPLY)) == [("reasoning", "\nLet me think: 2+2.\n"), ("content", "\n\nIt is 4.")]


def test_every_split_position_of_two_deltas():
    whole = list(pieces(REPLY))
    for i in range(len(REPLY) + 1):
        assert streamed([REPLY[:i], REPLY[i:]]) == whole, i


def test_one_character_at_a_time():
    assert streamed(list(REPLY)) == list(pieces(REPLY))


def test_partial_tag_is_held_back_then_released():
    s = ReasoningSplitter()
    assert s.feed("a <thi") == [("content", "a ")]
    assert s.feed("nk>x") == [("reasoning", "x")]
    t = ReasoningSplitter()
    assert t.feed("a <thi") == [("content", "a ")]
    assert t.feed("s and that") == [("content", "<this and that")]
    u = ReasoningSplitter()
    u.feed("end <")
    assert u.flush() == [("content", "<")]


def test_reply_that_begins_inside_reasoning():
    text = f"hmm{CLOSE}answer"
    assert starts_inside(text) and not starts_inside(REPLY) and not starts_inside("plain")
    assert split_reasoning(text) == ("hmm", "answer")
    assert split_reasoning(text, inside=False) == ("", f"hmm{CLOSE}answer")
    assert streamed(["hm", "m</th", "ink>ans", "wer"], inside=True) == [("reasoning", "hmm"), ("content", "answer")]


def test_unclosed_reasoning_is_all_reasoning():
    assert split_reasoning(f"{OPEN}still thinking") == ("still thinking", "")
    assert streamed([f"{OPEN}still", " thinking</thi"]) == [("reasoning", "still thinking</thi")]


def test_opens_reasoning():
    assert opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # Qwen3, enable_thinking off
    assert not opens_reasoning("<|im_start|>assistant\n")


def test_tagger_round_trip():
    tagger = ReasoningTagger()
    text = "".join(tagger.tagged(r, c) for r, c in [("", ""), ("I think", ""), (" more", ""), ("", "Yes"), ("", ".")])
    assert text == f"{OPEN}I think more{CLOSE}Yes."
    assert split_reasoning(text) == ("I think more", "Yes.")


ALPHABET = st.sampled_from(["<", ">", "/", "t", "h", "i", "n", "k", "a", " ", OPEN, CLOSE, "<th", "ink>", "</"])


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=30), st.lists(st.integers(0, 200), max_size=8), st.booleans())
def test_streamed_equals_whole_string(tokens, cuts, inside):
    text = "".join(tokens)
    points = sorted({min(c, len(text)) for c in cuts})
    deltas = [text[a:b] for a, b in zip([0] + points, points + [len(text)])]
    assert streamed(deltas, inside) == merged(pieces(text, inside))
