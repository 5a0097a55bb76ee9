"""End to end: the real `llmchat` command on the default model, in a real terminal (tmux). Ask, read the
reply and the panels' figures off the screen, ask again (the prefix cache shows), quit, find it on disk."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmchat.core.chats.store import ChatStore

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France? Answer in one sentence."


class Tmux:
    def __init__(self, name: str, command: list[str], width: int = 160, height: int = 48) -> None:
        self.name = name
        shell = "env -u COLUMNS -u LINES " + " ".join(_quote(c) for c in command)  # the pane's size, not pytest's
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height),
                        f"{shell}; echo EXITED $?; sleep 30"], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True,
                              check=True).stdout

    def keys(self, *keys: str, literal: bool = False) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *(["-l"] if literal else []), *keys], check=True)
        time.sleep(0.15)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.screen(), re.S)
            if match:
                return match
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} on screen after {timeout} s:\n{self.screen()}")
            time.sleep(0.2)

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def llmchat_command() -> str:
    venv_bin = str(Path(sys.executable).parent)
    found = shutil.which("llmchat", path=os.pathsep.join([venv_bin, os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail("the `llmchat` command is not installed (pip install -e .)")
    return found


def test_llmchat_in_a_terminal_answers_and_shows_its_figures(default_model_dir, tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    data = tmp_path / "data"
    term = Tmux(f"llmchat-e2e-{os.getpid()}", [llmchat_command(), "--data-dir", str(data)])
    try:
        start = time.monotonic()
        term.wait_for(r"Message \(Enter sends", timeout=30)  # painted before the model is loaded
        term.wait_for(r"context 0/8,192", timeout=60)  # the model is ready
        print(f"\ntime to an interactive screen with the model ready: {time.monotonic() - start:.1f} s")

        # greedy and short: Ctrl+O opens the settings; temperature 0, max 40 tokens
        term.keys("C-o")
        term.wait_for(r"Temperature \(0 = greedy\)", timeout=10)
        term.keys("Tab")
        term.keys("End", *["BSpace"] * 6)
        term.keys("0", literal=True)
        term.keys("Tab", "Tab", "End", *["BSpace"] * 6)
        term.keys("40", literal=True)
        term.keys("C-s")
        term.wait_for(r"temp 0 · top-p 1 · max 40", timeout=10)

        term.keys(QUESTION, literal=True)
        term.keys("Enter")
        footer = term.wait_for(r"TTFT ([\d.]+ m?s) · TPOT ([\d.]+) ms · (\d+) tokens · reused 0 of (\d+) prompt", 60)
        screen = term.screen()
        assert "Paris" in screen
        ttft_text = footer.group(1)  # "412 ms", or "1.04 s" on a slow moment
        value, unit = ttft_text.split()
        ttft_ms = float(value) * (1 if unit == "ms" else 1000)
        tpot_ms, num_output, num_prompt = (float(footer.group(i)) for i in range(2, 5))
        assert 0 < ttft_ms < 30_000 and 0 < tpot_ms < 5_000 and 1 <= num_output <= 40 and 20 < num_prompt < 80
        # the panels say the same, in their own words
        assert re.search(rf"TTFT {re.escape(ttft_text)} · queue \+ prefill", screen)
        assert re.search(rf"reused 0 of {int(num_prompt)} prompt tokens", screen)
        assert re.search(rf"cached 0 · prefilled {int(num_prompt)}", screen)
        assert re.search(r"decode [\d.]+ tok/s · reads [\d.]+ GB/s", screen)
        kv = term.wait_for(r"used 0 · cached (\d+) · free ([\d,]+)", timeout=5)  # the panels refresh at 4 Hz
        assert int(kv.group(1)) >= int(num_prompt) // 16  # the finished turn's blocks stay cached, refcount 0

        # a second question in the same chat reuses the first turn's KV: only the new suffix is prefilled
        term.keys("And of Italy?", literal=True)
        term.keys("Enter")
        term.wait_for(r"tokens · reused \d+ of \d+ prompt.*tokens · reused \d+ of \d+ prompt", 60)  # 2 replies
        screen = term.screen()
        (_, first_prompt), (num_cached, num_prompt2) = [
            (int(a), int(b)) for a, b in re.findall(r"tokens · reused (\d+) of (\d+) prompt", screen)]
        assert first_prompt == num_prompt
        assert f"reused {num_cached} of {num_prompt2} prompt tokens" in screen  # the panel shows the latest turn
        assert num_cached >= (int(num_prompt) + num_output - 1) // 16 * 16 > 0 and num_prompt2 > num_cached

        term.keys("C-q")
        term.wait_for(r"EXITED 0", timeout=30)
    finally:
        term.kill()
    with ChatStore(data, readonly=True) as store:
        (summary,) = store.list_chats()
        chat = store.load_chat(summary.chat_id)
    assert summary.title == QUESTION[:47] + "…" or summary.title == QUESTION
    assert [m.role for m in chat.messages] == ["user", "assistant", "user", "assistant"]
    assert "Paris" in chat.messages[1].content
    assert chat.messages[3].metrics.num_cached_tokens == num_cached
    assert len(chat.token_ids) == chat.messages[3].metrics.num_prompt_tokens + chat.messages[3].metrics.num_output_tokens
