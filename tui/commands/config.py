"""The config file on the command line: its values fill the flags not given; `llmchat config` shows the result.

The rules of the file (keys, types, the one-line complaint) are core/user_config.py's; this file only
merges it with argparse's namespace: a flag given (not None) wins, then the file, then the built-in default.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ...core.api.params import DEFAULT_SAMPLING
from ...core.config import DEFAULT_KV_DISK_GB, DEFAULT_MODEL_LABEL
from ...core.chats.conversation import ChatSettings
from ...core.user_config import KEYS, UserConfig, config_path, load_or_default, load_user_config

# The built-in defaults of the sampling flags (`ask`; the app's new chats take them all: see chat_defaults).
SAMPLING_DEFAULTS = {k: getattr(DEFAULT_SAMPLING, k) for k in ("temperature", "top_p", "top_k", "max_tokens", "seed")}
_ENGINE_KEYS = ("model", "device", "kv_cache_gb", "kv_disk_gb", "threads")
# How a default that is not one value reads (the engine picks it).
_DEFAULT_TEXT = {"model": DEFAULT_MODEL_LABEL, "device": "cpu", "kv_cache_gb": "1 on CPU, 8 on CUDA",
                 "kv_disk_gb": DEFAULT_KV_DISK_GB, "kv_disk": True,
                 "threads": "auto: the CPUs this process may use", "theme": "the last one used"}


def resolve(args: argparse.Namespace, config: UserConfig) -> dict[str, tuple[object, str]]:
    """key -> (effective value, where it comes from: 'flag', 'file' or 'default')."""
    out: dict[str, tuple[object, str]] = {}
    for key in KEYS:
        file_value = getattr(config, key)
        flag_value = getattr(args, key, None)
        if key == "kv_disk":
            flag_value = False if getattr(args, "no_kv_disk", False) else None
        if flag_value is not None:
            out[key] = (flag_value, "flag")
        elif file_value is not None:
            out[key] = (file_value, "file")
        else:
            out[key] = (SAMPLING_DEFAULTS.get(key), "default")
    return out


def apply_user_config(args: argparse.Namespace, config: UserConfig) -> None:
    """Fill the flags this command has but was not given from the file (then the built-in sampling defaults)."""
    effective = resolve(args, config)
    remote = bool(getattr(args, "backend", None))  # --model then names the server's model, not a local file
    for key in (*_ENGINE_KEYS, *SAMPLING_DEFAULTS):
        if hasattr(args, key) and getattr(args, key) is None and not (remote and key == "model"):
            setattr(args, key, effective[key][0])
    if hasattr(args, "no_kv_disk") and effective["kv_disk"][0] is False:
        args.no_kv_disk = True
    args.user_config = config


def load_into_args(args: argparse.Namespace) -> None:
    """The file's values into args; a malformed file is one line on stderr and the defaults apply."""
    config, problem = load_or_default()
    if problem:
        print(f"llmchat: {problem} (going on with the defaults)", file=sys.stderr)
    apply_user_config(args, config)
    args.config_problem = problem


def chat_defaults(config: UserConfig | None, base: ChatSettings) -> ChatSettings:
    """A new chat's settings: `base` (the current chat's), with the sampling defaults the file sets."""
    if config is None:
        return replace(base)
    return replace(base, **{k: getattr(config, k) for k in ("temperature", "top_p", "max_tokens", "top_k", "seed")
                            if getattr(config, k) is not None})


def start_theme(config: UserConfig | None, available, saved: str) -> tuple[str, str | None]:
    """(the app's theme at start, a complaint if the file names a theme this Textual lacks)."""
    wanted = config.theme if config is not None else None
    if wanted is None:
        return saved, None
    if wanted not in available:
        return saved, f"config theme {wanted!r} is unknown; the themes are {', '.join(sorted(available))}"
    return wanted, None


def run_config(args: argparse.Namespace) -> int:
    """`llmchat config`: the file's path and the effective settings (exit 2 if the file is malformed)."""
    path = config_path()
    try:
        config, problem = load_user_config(path), None
    except ValueError as e:
        config, problem = UserConfig(), str(e)
    state = "malformed, ignored" if problem else ("found" if path.exists() else "not there; built-in defaults")
    print(f"config file: {path} ({state})")
    for key, (value, source) in resolve(args, config).items():
        default_text = _DEFAULT_TEXT.get(key) if source == "default" else None
        shown = _toml(value) if default_text is None else _toml(default_text).strip('"')
        print(f"  {key:12} = {shown:30} ({source})")
    key_problems = print_keys(config, path)
    if problem or key_problems:
        for line in [problem] if problem else key_problems:
            print(f"llmchat: {line}", file=sys.stderr)
        return 2
    return 0


def print_keys(config: UserConfig, path) -> list[str]:
    """The key of each action as the app will have it ([keys] in the file, else the default); returns the
    file's entries that were not taken (one line each)."""
    from ..text.key_bindings import app_keymap, effective, remappable_bindings

    keymap, problems = app_keymap(config.keys, path)
    print("keys (action = key; [keys] in the file moves one):")
    for b in effective(remappable_bindings(), keymap):
        source = "file" if b.source == "file" else "default" if b.source == "default" else f"none: {b.source}"
        print(f"  {b.action:17} = {_toml(b.keys) if b.keys else '(none)':30} ({source}) {b.description}")
    return problems


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return f'"{value}"'
    return f"{value:g}" if isinstance(value, float) else str(value)
