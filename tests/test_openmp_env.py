"""The wait policy reaches libgomp only when it is set before torch loads: the command sets it first thing,
keeps the user's own, and refuses once torch is loaded. libgomp says what it read (OMP_DISPLAY_ENV)."""
from __future__ import annotations

import os
import subprocess
import sys

from llmchat.core.openmp_env import SPIN_COUNT, openmp_defaults, prepare_openmp


def libgomp_settings(code: str, **env: str) -> dict[str, str]:
    """The ICVs libgomp printed when it loaded, in a fresh interpreter running `code`."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    environ.update(env, OMP_DISPLAY_ENV="verbose")
    err = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True,
                         check=True).stderr
    pairs = [line.strip().split(" = ", 1) for line in err.splitlines() if " = " in line]
    return {k: v.strip("'") for k, v in pairs}


def test_prepare_sets_the_defaults_only_where_the_user_set_none():
    env: dict[str, str] = {"PATH": "/bin"}
    assert prepare_openmp(env, modules={}) == openmp_defaults() and env == {"PATH": "/bin", **openmp_defaults()}
    for own in ({"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "5"}):
        env = dict(own)
        assert prepare_openmp(env, modules={}) == {} and env == own


def test_prepare_refuses_once_torch_is_loaded():
    import torch  # noqa: F401

    env: dict[str, str] = {}
    assert prepare_openmp(env) == {} and env == {}


def test_the_command_s_wait_policy_reaches_libgomp():
    code = "from llmchat.tui.cli import main; from llmchat.core.openmp_env import prepare_openmp\n" \
           "prepare_openmp(); import torch; torch.ones(4).sum()"
    assert libgomp_settings(code)["GOMP_SPINCOUNT"] == SPIN_COUNT
    assert libgomp_settings(code, GOMP_SPINCOUNT="77")["GOMP_SPINCOUNT"] == "77"  # the user's own wins


def test_setting_it_after_torch_loads_changes_nothing():
    late = "import os, torch\nos.environ['GOMP_SPINCOUNT'] = '5'\ntorch.ones(10**6).sum()"
    assert libgomp_settings(late)["GOMP_SPINCOUNT"] != "5"
