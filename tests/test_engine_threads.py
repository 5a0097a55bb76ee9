"""The engine's one compute team: sized by the config on the thread that steps it (the app's engine thread,
ask's main thread), reported in EngineStats, and shown in the Engine panel."""
from __future__ import annotations

import threading

import pytest
import torch

from llmchat.core.config import EngineConfig
from llmchat.core.cpu_threads import plan_threads, use_threads
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.api.params import SamplingParams
from llmchat.core.backends.service import EngineService


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    use_threads(before)  # (torch keeps the last count for threads that start later)


def test_the_thread_that_steps_the_engine_gets_the_configured_team(tiny_model, restore_threads):
    engine = LLMEngine(tiny_model, EngineConfig(max_num_seqs=1, kv_cache_bytes=1 << 20, num_threads=1))
    seen = {}

    def step_here() -> None:
        engine.add_request([1, 2, 3], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
        while engine.has_work:
            engine.step()
        seen["team"] = torch.get_num_threads()

    thread = threading.Thread(target=step_here)
    thread.start()
    thread.join()
    assert seen["team"] == 1
    stats = engine.stats()
    assert (stats.num_threads, stats.num_cpus, stats.threads_adaptive) == (1, plan_threads().num_cpus, False)


def test_the_services_engine_thread_runs_the_team_it_reports(tiny_model, restore_threads):
    auto = plan_threads()
    for num_threads, expected, adaptive in ((1, 1, False), (None, None, True)):
        service = EngineService(LLMEngine(tiny_model, EngineConfig(max_num_seqs=1, kv_cache_bytes=1 << 20,
                                                                   num_threads=num_threads)))
        try:
            service.submit_ids([1, 2, 3], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)).wait(60)
            team = service._call(lambda engine: torch.get_num_threads()).result(60)  # asked on the engine thread
            stats = service.stats()
            assert stats.num_threads == team and stats.threads_adaptive is adaptive
            assert team == (expected or stats.num_threads) and 1 <= team <= auto.num_cpus
        finally:
            service.shutdown()


def test_a_zero_thread_config_is_refused():
    with pytest.raises(ValueError, match="--threads"):
        EngineConfig(num_threads=0)
