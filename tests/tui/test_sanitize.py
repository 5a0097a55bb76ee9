"""safe_text: every terminal control code becomes visible literal text; everything else is left alone."""
from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from llmchat.core.text.sanitize import is_safe, safe_text

FAMILIES = {
    "CSI clear screen": ("\x1b[2J\x1b[H", "␛[2J␛[H"),
    "SGR colour": ("\x1b[31mred\x1b[0m", "␛[31mred␛[0m"),
    "OSC 8 hyperlink": ("\x1b]8;;https://evil.example\x1b\\x\x1b]8;;\x1b\\", "␛]8;;https://evil.example␛\\x␛]8;;␛\\"),
    "OSC 52 clipboard": ("\x1b]52;c;aGVsbG8=\x07", "␛]52;c;aGVsbG8=␇"),
    "DCS": ("\x1bP1$qm\x1b\\", "␛P1$qm␛\\"),
    "bare ESC": ("a\x1bb", "a␛b"),
    "8-bit CSI/OSC/DCS (C1)": ("\x9b2J\x9d52;c;x\x9c\x90q", "\\x9b2J\\x9d52;c;x\\x9c\\x90q"),
    "BEL BS VT FF NUL": ("\x07\x08\x0b\x0c\x00", "␇␈␋␌␀"),
    "lone CR (overwrites a line)": ("safe\rEVIL", "safe␍EVIL"),
    "DEL": ("a\x7fb", "a␡b"),
    "bidi override": ("abc\u202edcba\u202c", "abc\\u202edcba\\u202c"),
}


def test_each_family_of_control_sequences_becomes_literal():
    for name, (raw, shown) in FAMILIES.items():
        assert safe_text(raw) == shown, name
        assert is_safe(shown) and not is_safe(raw), name


def test_newlines_tabs_text_and_markup_are_untouched():
    text = "line 1\n\tindented [bold]not markup[/bold] `code` 日本語 emoji 🙂 é"
    assert safe_text(text) == text and is_safe(text)
    assert safe_text("a\r\nb\r\n") == "a\nb\n"  # Windows line ends are just line ends


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x3000), max_size=200))
def test_output_never_holds_a_control_code_and_is_stable(text):
    out = safe_text(text)
    assert is_safe(out)
    for ch in out:
        assert ch in "\n\t" or unicodedata.category(ch) != "Cc", repr(ch)
    assert safe_text(out) == out  # idempotent: safe text stays as it is


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs")), max_size=200))
def test_printable_text_is_unchanged(text):
    assert safe_text(text) == text
