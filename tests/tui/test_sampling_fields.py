"""The settings dialog's top-k, seed and stop-string fields: text <-> values, and the one-line complaints."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmchat.core.chats.conversation import ChatSettings
from llmchat.tui.text.sampling_fields import (
    MAX_STOP_CHARS, parse_seed, parse_stop_lines, parse_top_k, sampling_extras, stop_lines,
)


def test_top_k_and_seed_read_whole_numbers_and_empty():
    assert parse_top_k("") == 0 and parse_top_k(" 40 ") == 40 and parse_top_k("0") == 0
    assert parse_seed("") is None and parse_seed("0") == 0 and parse_seed(str(2**63 - 1)) == 2**63 - 1
    for bad in ("-1", "4.5", "forty"):
        with pytest.raises(ValueError, match="top-k must be a whole number >= 0"):
            parse_top_k(bad)
    for bad in ("-1", "1e3", str(2**63), "x"):
        with pytest.raises(ValueError, match="seed must be a whole number from 0 to"):
            parse_seed(bad)


def test_stop_strings_one_per_line_with_escapes():
    assert parse_stop_lines("") == ()
    assert parse_stop_lines("User:\n\n  \n\\n\\n\nEND\\\\\ntab\\there\nUser:") == ("User:", "\n\n", "END\\", "tab\there")
    with pytest.raises(ValueError, match=r"stop string 2: unknown escape \\q"):
        parse_stop_lines("ok\na\\q")
    with pytest.raises(ValueError, match=r"stop string 1: unknown escape \\ "):
        parse_stop_lines("trailing\\")
    with pytest.raises(ValueError, match="at most 8 stop strings"):
        parse_stop_lines("\n".join(f"s{i}" for i in range(9)))
    with pytest.raises(ValueError, match=f"at most {MAX_STOP_CHARS}"):
        parse_stop_lines("x" * (MAX_STOP_CHARS + 1))


@given(st.lists(st.text(min_size=1, max_size=20).filter(lambda s: s.strip() and "\r" not in s), max_size=8,
                unique=True))
def test_a_stop_list_reads_back_from_its_text(stop):
    stop = [s for s in stop if not any(c in s for c in "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")]  # (line breaks)
    assert parse_stop_lines(stop_lines(tuple(stop))) == tuple(stop)


def test_the_header_names_the_settings_that_are_set():
    assert sampling_extras(ChatSettings()) == []
    assert sampling_extras(ChatSettings(top_k=40, seed=0, stop=("a", "b"))) == ["top-k 40", "seed 0", "2 stop strings"]
