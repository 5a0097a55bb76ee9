"""OpenMP's spin time for the engine's compute team: set in the environment before torch loads.

torch's CPU wheel bundles GNU OpenMP (libgomp), which reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when
the library is loaded, that is at `import torch`; set later they change nothing (tests/test_openmp_env.py
reads what libgomp took through OMP_DISPLAY_ENV). So the `llmchat` command sets them right after parsing its
arguments, before anything imports torch, unless the user set either one (theirs wins). Intel OpenMP's
KMP_BLOCKTIME does nothing here: the wheel's MKL uses the GNU threading layer too.

Between two parallel regions a libgomp worker spins GOMP_SPINCOUNT times, then sleeps on a futex (default
300,000 spins, about 3 ms; 0 with OMP_WAIT_POLICY=passive). A decode step is hundreds of small ops with
Python in between, so a worker that still spins when the next op comes saves a wake-up. Measured on a 2-core
AMD EPYC (issue 22's note; default model, 2 threads, medians):
- `ask` (the engine on the main thread, nothing else running): 3,000,000 spins decode faster than the
  default (TPOT about 40 against 50 ms); 30,000 no better than the default.
- the app: the default is best: a worker spinning longer takes the CPU that Textual's thread needs to draw
  (TPOT 81-100 ms against 55 ms), and 30,000 is worse too (75 ms).
- beside a busy program a team of two loses whatever the policy (passive: 1.5x, default 4.2x, 10,000 spins
  5.9x slower); the engine then runs one thread (core/cpu_load.py), for which the policy does not matter.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

WAIT_POLICY_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
OWN_MARK = "LLMCHAT_OPENMP_SET"  # names the variables llmchat set (inherited by its child processes), not the user
# set-up -> the environment libgomp gets there; a set-up not listed keeps libgomp's defaults
SETUP_ENV: dict[str, dict[str, str]] = {
    "ask": {"GOMP_SPINCOUNT": "3000000"},  # the engine on the main thread and nothing else to run
    "app": {},  # Textual's thread needs CPU time between the engine's ops
}


def setup_of(command: str | None) -> str:
    """Which set-up a command runs: `ask` and `bench` step the engine on their main thread; the app and
    `serve` step it on an engine thread beside an event loop."""
    return "ask" if command in ("ask", "bench") else "app"


def prepare_openmp(setup: str, environ: MutableMapping[str, str] | None = None,
                   modules: Mapping = sys.modules) -> dict[str, str]:
    """Give libgomp the set-up's environment before torch loads; what was set. Nothing changes when torch is
    loaded already or when the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT (a value llmchat set in a parent
    process is not the user's: it is replaced)."""
    environ = os.environ if environ is None else environ
    if "torch" in modules:
        return {}
    ours = set(environ.get(OWN_MARK, "").split(",")) - {""}
    if any(name in environ and name not in ours for name in WAIT_POLICY_VARS):
        return {}
    for name in ours:
        environ.pop(name, None)
    chosen = dict(SETUP_ENV[setup])
    environ.update(chosen)
    environ[OWN_MARK] = ",".join(sorted(chosen))
    return chosen
