"""Key bindings the config file's [keys] table can move: `action = "key"` (e.g. `new_chat = "ctrl+t"`).

Every binding of the app (and of the input box) carries an id (tui/actions/registry.py, the one table of actions); the file's
entries become a Textual keymap (App.set_keymap), checked one by one: an unknown action, a key that is not
a key, or a key already given to another action in the file is ONE line naming the file, the line and the
action, and that action keeps its default key. A key the file gives to one action is taken from the action
that had it by default (that one is then left to the palette, Ctrl+P); `llmchat config` lists the result.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from textual.binding import Binding
from textual.keys import Keys, _character_to_key

from ...core.user_config import KEYS_TABLE, KeyEntry

MODIFIERS = ("ctrl", "shift", "alt", "meta", "super", "hyper")
_NAMED_KEYS = frozenset(k.value for k in Keys if "+" not in k.value and not k.value.startswith("<"))
_CHARACTER_NAMES = frozenset(_character_to_key(c) for c in string.punctuation)


def key_problem(keys: object) -> str | None:
    """Why `keys` is not a Textual key list ("ctrl+t", "f6", "ctrl+up,alt+up"); None if it is one."""
    if not isinstance(keys, str) or not keys.strip():
        return 'the key must be a string such as "ctrl+t" or "f6"'
    for key in keys.split(","):
        *modifiers, base = key.strip().split("+") if key.strip() != "+" else ["+"]
        unknown = [m for m in modifiers if m not in MODIFIERS]
        if unknown or len(set(modifiers)) != len(modifiers):
            return f"{key.strip()!r} has an unknown or repeated modifier (use {', '.join(MODIFIERS)})"
        if not (base in _NAMED_KEYS or base in _CHARACTER_NAMES or (len(base) == 1 and base.isprintable())):
            return f"{key.strip()!r} is not a key (e.g. ctrl+t, alt+x, f6, escape, pageup, ctrl+up)"
    return None


def normalized(keys: str) -> str:
    """As Textual names them: "ctrl+t,/" -> "ctrl+t,slash"."""
    out = []
    for key in keys.split(","):
        *modifiers, base = key.strip().split("+") if key.strip() != "+" else ["+"]
        out.append("+".join([*modifiers, _character_to_key(base) if len(base) == 1 else base]))
    return ",".join(out)


def keymap_from(entries: tuple[KeyEntry, ...], path: Path, defaults: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(binding id -> keys, one line per entry that was not taken). `defaults`: binding id -> its default keys."""
    keymap: dict[str, str] = {}
    problems: list[str] = []
    owner: dict[str, str] = {}  # a key the file gave -> that action
    for entry in entries:
        where = f"{path}" + (f", line {entry.line}" if entry.line else "") + f": [{KEYS_TABLE}] {entry.action}"
        if entry.action not in defaults:
            problems.append(f"{where} is not an action; the actions are {', '.join(defaults)}")
            continue
        keeps = f"; {entry.action} keeps {defaults[entry.action]}"
        why = key_problem(entry.key)
        if why is not None:
            problems.append(f"{where}: {why}{keeps}")
            continue
        keys = normalized(entry.key)
        taken = [k for k in keys.split(",") if k in owner]
        if taken:
            problems.append(f"{where}: {taken[0]} is already given to {owner[taken[0]]} in this file{keeps}")
            continue
        owner.update({k: entry.action for k in keys.split(",")})
        keymap[entry.action] = keys
    return keymap, problems


@dataclass(frozen=True, slots=True)
class EffectiveBinding:
    action: str  # the binding id
    keys: str  # "" when its default key went to another action
    description: str
    source: str  # "file" | "default" | "lost to <action>"


def default_keys(bindings: list[Binding]) -> dict[str, tuple[str, str]]:
    """binding id -> (its default keys, its description), for the bindings that have an id."""
    out: dict[str, tuple[str, str]] = {}
    for b in bindings:
        if b.id and b.id not in out:
            out[b.id] = (b.key, b.description)
    return out


def effective(bindings: list[Binding], keymap: dict[str, str]) -> list[EffectiveBinding]:
    """Each remappable action with the keys it answers to under `keymap`."""
    given = {k: action for action, keys in keymap.items() for k in keys.split(",")}
    out = []
    for action, (keys, description) in default_keys(bindings).items():
        if action in keymap:
            out.append(EffectiveBinding(action, keymap[action], description, "file"))
            continue
        kept = [k for k in keys.split(",") if k not in given]
        lost = [given[k] for k in keys.split(",") if k in given]
        source = "default" if not lost else f"{keys} given to {lost[0]}"
        out.append(EffectiveBinding(action, ",".join(kept), description, source))
    return out


def remappable_bindings() -> list[Binding]:
    """The app's bindings and the input box's, with their ids (what [keys] may name)."""
    from ..actions.registry import app_bindings, prompt_bindings

    return [*app_bindings(), *prompt_bindings()]


def keys_now(keymap: dict[str, str]) -> dict[str, str]:
    """binding id -> the keys it answers to under the app's keymap ("" : its key went to another action)."""
    return {b.action: b.keys for b in effective(remappable_bindings(), keymap)}


def app_keymap(entries: tuple[KeyEntry, ...], path: Path) -> tuple[dict[str, str], list[str]]:
    """The keymap the app starts with, and the file's bad entries (one line each)."""
    defaults = {action: keys for action, (keys, _) in default_keys(remappable_bindings()).items()}
    return keymap_from(entries, path, defaults)


def apply_config_keys(app, user_config) -> list[str]:
    """Give `app` the keymap of the config file's [keys]; returns the lines about entries not taken."""
    from ...core.user_config import config_path

    keymap, problems = app_keymap(user_config.keys if user_config is not None else (), config_path())
    app.set_keymap(keymap)
    return problems
