"""Torch work done off the engine thread runs in a thread of its own that ends when the work does.

OpenMP (torch's CPU parallel backend, libgomp) keeps a team of worker threads for every thread that has run
a parallel region, for as long as that thread lives. With two live teams and more OpenMP threads than CPUs,
libgomp stops spinning between parallel regions, so each small op of the engine's decode step then waits
for its worker to be woken. Measured on a 2-core AMD EPYC (SmolLM2-135M fp32, greedy, 100 tokens): the
engine thread's TPOT was 95-108 ms while the thread that had loaded the model was still alive, 51-57 ms
once that thread had ended; one decode step's attention `bmm` took 76 us instead of 10.

The model load, the KV cache's allocation and the copy-bandwidth probe all run torch ops. The app ran them
in its executor thread and the server in its main thread, both of which stay alive; so they run here.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_in_passing_thread(fn: Callable[[], T], name: str = "llmchat-torch-work") -> T:
    """fn() in a new thread that ends with it (its OpenMP team goes too); its result, or its exception."""
    outcome: list = []

    def target() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as error:  # noqa: BLE001 - handed to the caller, raised there
            outcome.append((False, error))

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value
