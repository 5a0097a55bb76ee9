"""`llmchat ask` output: model text is made terminal-safe (CSI, OSC 52, OSC 8, C0/C1) unless --raw into a pipe."""
from __future__ import annotations

import io
import os
import sys

import pytest

from llmchat.core.backends import ask as core_ask
from llmchat.core.text.sanitize import SafeTextStream, is_safe, safe_text
from llmchat.tui.commands import cli

HOSTILE_REPLY = [
    "Sure. \x1b]52;c;ZWNobyBwd25lZA==\x07",  # OSC 52: write the clipboard
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x1b[2J\x1b[31mred\x1b[0m",  # CSI: clear the screen, colours
    "\x9b6n\x9d0;title\x9c",  # 8-bit CSI / OSC / ST
    "bell\x07 back\x08 del\x7f line\r",
    "\nnext\ttab\u202eevil",
]
RAW = "".join(HOSTILE_REPLY)


class FakeStream:
    metrics = None
    model_line = ""

    def __iter__(self):
        yield from HOSTILE_REPLY


def test_the_stream_sanitiser_matches_the_whole_text_sanitiser() -> None:
    stream = SafeTextStream()
    out = "".join(stream.feed(d) for d in HOSTILE_REPLY) + stream.flush()
    assert out == safe_text(RAW) and is_safe(out)
    assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out and "\r" not in out
    assert "\nnext\ttab" in out and "␛]52;c;" in out  # newline and tab stay; the rest shows as literal characters
    stream = SafeTextStream()  # a CRLF split over two deltas is one newline, a lone CR is shown
    assert stream.feed("a\r") + stream.feed("\nb\r") + stream.flush() == "a\nb\u240d"


def run_ask(monkeypatch: pytest.MonkeyPatch, stdout, *flags: str) -> int:
    monkeypatch.setattr(core_ask, "ask_stream", lambda *a, **k: FakeStream())
    monkeypatch.setattr(sys, "stdout", stdout)
    return cli.main(["ask", "hi", *flags])


@pytest.mark.parametrize("flags", [(), ("--temperature", "0")])
def test_a_pipe_gets_sanitised_text_by_default(monkeypatch: pytest.MonkeyPatch, flags) -> None:
    out = io.StringIO()
    assert run_ask(monkeypatch, out, *flags) == 0
    assert out.getvalue() == safe_text(RAW) + "\n"


def test_raw_into_a_pipe_keeps_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    assert run_ask(monkeypatch, out, "--raw") == 0
    assert out.getvalue() == RAW + "\n"


@pytest.mark.parametrize("flags", [(), ("--raw",)])
def test_a_terminal_always_gets_sanitised_text(monkeypatch: pytest.MonkeyPatch, flags) -> None:
    primary, secondary = os.openpty()
    try:
        with open(secondary, "w", encoding="utf-8", closefd=False) as tty:
            assert tty.isatty()
            assert run_ask(monkeypatch, tty, *flags) == 0
            tty.flush()
        os.close(secondary)
        secondary = -1
        received = b""
        while chunk := _read(primary):
            received += chunk
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    text = received.decode("utf-8").replace("\r\n", "\n")  # the pty's own output processing adds CRs
    assert text == safe_text(RAW) + "\n" and b"\x1b" not in received


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the other side is closed and everything was read
        return b""
