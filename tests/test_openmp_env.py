"""The spin time reaches libgomp only when it is set before torch loads: the command sets it first thing for
its set-up, keeps the user's own, replaces what a parent llmchat set, and refuses once torch is loaded.
libgomp says what it read (OMP_DISPLAY_ENV)."""
from __future__ import annotations

import os
import subprocess
import sys

from llmchat.core.openmp_env import OWN_MARK, SETUP_ENV, prepare_openmp, setup_of

ASK_SPIN = SETUP_ENV["ask"]["GOMP_SPINCOUNT"]


def libgomp_settings(code: str, **env: str) -> dict[str, str]:
    """The ICVs libgomp printed when it loaded, in a fresh interpreter running `code`."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", OWN_MARK)}
    environ.update(env, OMP_DISPLAY_ENV="verbose")
    err = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True,
                         check=True).stderr
    pairs = [line.strip().split(" = ", 1) for line in err.splitlines() if " = " in line]
    return {k: v.strip("'") for k, v in pairs}


def test_each_command_gets_its_setups_environment():
    assert [setup_of(c) for c in ("ask", "bench", None, "serve")] == ["ask", "ask", "app", "app"]
    env: dict[str, str] = {"PATH": "/bin"}
    assert prepare_openmp("ask", env, modules={}) == SETUP_ENV["ask"]
    assert env == {"PATH": "/bin", **SETUP_ENV["ask"], OWN_MARK: ",".join(sorted(SETUP_ENV["ask"]))}
    child = dict(env)  # a child process of that one (the bench's app set-up): ours is replaced, not kept
    assert prepare_openmp("app", child, modules={}) == SETUP_ENV["app"]
    assert not any(name in child for name in SETUP_ENV["ask"])


def test_the_users_own_setting_wins():
    for own in ({"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "5"}):
        env = dict(own)
        assert prepare_openmp("ask", env, modules={}) == {} and env == own


def test_prepare_refuses_once_torch_is_loaded():
    env: dict[str, str] = {}
    assert prepare_openmp("ask", env, modules={"torch": object()}) == {} and env == {}


def test_the_commands_spin_time_reaches_libgomp():
    code = "from llmchat.core.openmp_env import prepare_openmp\nprepare_openmp({setup!r})\nimport torch"
    assert libgomp_settings(code.format(setup="ask"))["GOMP_SPINCOUNT"] == ASK_SPIN
    assert libgomp_settings(code.format(setup="app"))["GOMP_SPINCOUNT"] == "300000"  # libgomp's own default
    assert libgomp_settings(code.format(setup="ask"), GOMP_SPINCOUNT="77")["GOMP_SPINCOUNT"] == "77"


def test_setting_it_after_torch_loads_changes_nothing():
    late = "import os, torch\nos.environ['GOMP_SPINCOUNT'] = '5'\ntorch.ones(10**6).sum()"
    assert libgomp_settings(late)["GOMP_SPINCOUNT"] == "300000"
