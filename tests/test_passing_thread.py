"""Torch work off the engine thread runs in a thread that ends with it (core/passing_thread.py): a live thread
that once ran torch's OpenMP keeps a team of workers, and two live teams made the engine's decode ~1.8x
slower on a 2-core machine. The app's engine factory builds the engine that way."""
from __future__ import annotations

import threading

import pytest

from llmchat.core.passing_thread import run_in_passing_thread


def test_the_result_comes_back_from_a_thread_that_has_ended():
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    assert run_in_passing_thread(work) == 42
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()


def test_an_error_is_raised_in_the_caller():
    def fail() -> None:
        raise FileNotFoundError("no such model")

    with pytest.raises(FileNotFoundError, match="no such model"):
        run_in_passing_thread(fail)


def test_the_apps_engine_is_built_in_a_thread_that_has_ended_when_the_engine_starts(tiny_model, monkeypatch):
    from llmchat.core.model import loader as loader
    from llmchat.core.config import EngineConfig
    from llmchat.tui.bridge import default_engine_factory

    loaded_in: list[threading.Thread] = []

    def load(config, progress=None):
        loaded_in.append(threading.current_thread())
        return tiny_model

    monkeypatch.setattr(loader, "load_model_for", load)
    service = default_engine_factory(EngineConfig(max_num_seqs=2))(lambda line: None, lambda handle, event: None)
    try:
        assert loaded_in[0] is not threading.current_thread() and not loaded_in[0].is_alive()
        assert service.alive
    finally:
        service.shutdown()
