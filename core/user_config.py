"""The user's config file, `<user config dir>/llmchat/config.toml`: defaults that flags override.

A flat TOML table; every key is optional:

    model = "~/models/qwen2.5-0.5b-instruct.gguf"   # a .gguf file or a Hugging Face folder
    device = "cpu"                                  # cpu or cuda
    kv_cache_gb = 2.0                               # KV cache budget in memory
    kv_disk_gb = 8.0                                # the prefix cache's disk tier budget
    kv_disk = true                                  # false: no disk tier
    temperature = 0.7                               # sampling defaults (ask; new chats in the app)
    top_p = 0.95
    top_k = 40
    max_tokens = 512
    seed = 1
    theme = "textual-light"                         # the app's theme at start
    threads = 2                                     # compute threads (default: auto, the CPUs this process
                                                    # may use, fewer while other programs keep them busy)

    [keys]                                          # key bindings: action = "key" (see `llmchat config`)
    new_chat = "ctrl+t"

A missing file is no error. A malformed one (bad TOML, an unknown key, a value of the wrong type or
range) is described in ONE line naming the line and key (ConfigError), and the caller goes on with the
built-in defaults: nothing of a bad file is half-applied. The [keys] table is kept as written (KeyEntry, with
its line): which actions and key names exist is the app's to check (tui/text/key_bindings.py), entry by entry, so a
bad entry costs only that key. `LLMCHAT_CONFIG` names another file (tests).
Stdlib only (tomllib); no torch, no Textual.
"""
from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

CONFIG_ENV = "LLMCHAT_CONFIG"
CONFIG_NAME = "config.toml"
DEVICES = ("cpu", "cuda")


class ConfigError(ValueError):
    """A malformed config file; str() is the one line to show."""


@dataclass(frozen=True, slots=True)
class UserConfig:
    """What the file sets; None: not set there (the flag's or the built-in default applies)."""

    model: str | None = None
    device: str | None = None
    kv_cache_gb: float | None = None
    kv_disk_gb: float | None = None
    kv_disk: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    seed: int | None = None
    theme: str | None = None
    threads: int | None = None
    keys: tuple["KeyEntry", ...] = ()  # the [keys] table, in file order


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One line of the [keys] table: an action's name and the key(s) the file gives it, unchecked."""

    action: str
    key: object
    line: int | None


KEYS = tuple(f.name for f in fields(UserConfig) if f.name != "keys")  # the flat settings
KEYS_TABLE = "keys"

# key -> (the TOML type it takes, a check of its value, what a valid value is)
_FLOAT = (int, float)
_RULES: dict[str, tuple[tuple[type, ...], object, str]] = {
    "model": ((str,), lambda v: bool(v.strip()), "a non-empty path"),
    "device": ((str,), lambda v: v in DEVICES, "cpu or cuda"),
    "kv_cache_gb": (_FLOAT, lambda v: math.isfinite(v) and v > 0, "a positive number"),
    "kv_disk_gb": (_FLOAT, lambda v: math.isfinite(v) and v > 0, "a positive number"),
    "kv_disk": ((bool,), lambda v: True, "true or false"),
    "temperature": (_FLOAT, lambda v: math.isfinite(v) and v >= 0, "a number >= 0"),
    "top_p": (_FLOAT, lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "top_k": ((int,), lambda v: v >= 0, "an integer >= 0 (0: off)"),
    "max_tokens": ((int,), lambda v: v > 0, "a positive integer"),
    "seed": ((int,), lambda v: True, "an integer"),
    "theme": ((str,), lambda v: bool(v.strip()), "a theme name"),
    "threads": ((int,), lambda v: v >= 1, "a whole number of threads >= 1 (leave it out for auto)"),
}
assert set(_RULES) == set(KEYS)


def config_path() -> Path:
    """$LLMCHAT_CONFIG if set, else `<user config dir>/llmchat/config.toml` (~/.config/llmchat on Linux)."""
    override = os.environ.get(CONFIG_ENV)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("llmchat")) / CONFIG_NAME


def _line_of(text: str, key: str) -> int | None:
    name = rf"""(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')"""
    pattern = re.compile(rf"^\s*(?:{name}\s*[=.]|\[+\s*{name}\s*[].])")  # key = ..., key.sub = ..., [key]
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return None


def _line_in_table(text: str, table: str, key: str) -> int | None:
    """The line of `key = ...` within `[table]`; None where the file writes it otherwise (inline, dotted)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(rf"^\s*\[\s*{re.escape(table)}\s*\]", line)), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
        found = _line_of("\n".join(lines[start + 1:end]), key)
        if found is not None:
            return start + 1 + found
    return None


def _where(path: Path, text: str, key: str) -> str:
    line = _line_of(text, key)
    return f"{path}" + (f", line {line}" if line else "") + f": key {key!r}"


def parse_config(text: str, path: Path) -> UserConfig:
    """The settings of a config file's text; ConfigError (one line) if anything in it is wrong."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}; fix or remove the file") from None
    values = {}
    for key, value in raw.items():
        if key == KEYS_TABLE:
            if not isinstance(value, dict):
                raise ConfigError(f"{_where(path, text, key)} must be a table of action = \"key\" lines, "
                                  f"not {value!r}")
            values[key] = tuple(KeyEntry(a, k, _line_in_table(text, key, a)) for a, k in value.items())
            continue
        if key not in _RULES:
            raise ConfigError(f"{_where(path, text, key)} is unknown; the keys are {', '.join(KEYS)} "
                              f"and a [{KEYS_TABLE}] table")
        types, check, wanted = _RULES[key]
        if isinstance(value, bool) and bool not in types or not isinstance(value, types) or not check(value):
            raise ConfigError(f"{_where(path, text, key)} must be {wanted}, not {value!r}")
        values[key] = float(value) if types is _FLOAT else value
    return UserConfig(**values)


def load_user_config(path: Path | None = None) -> UserConfig:
    """The file's settings (all None when there is no file); ConfigError if it is malformed or unreadable."""
    path = config_path() if path is None else path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return UserConfig()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read it ({e}); fix or remove the file") from None
    return parse_config(text, path)


def load_or_default(path: Path | None = None) -> tuple[UserConfig, str | None]:
    """(the file's settings, None), or (no settings, the one-line complaint) for a malformed file."""
    try:
        return load_user_config(path), None
    except ConfigError as e:
        return UserConfig(), str(e)
