"""Switch the model from the app (palette: Switch model): one model loaded at a time.

The picker lists the default model, the recently used --model names (the store's app setting
`recent_models`), the cache dir's models and every other model `llmchat models` finds (core/weights/catalog.py,
inventory.py), each with its size and the memory it needs (weights + KV budget) against the memory free, so
what will not fit is marked before it is picked. Switching unloads the engine, then
loads the chosen model in a worker thread with its progress on the loading line; if that fails, the
failure is one line and the model that was loaded before is loaded again. Chats keep their token ids;
a chat whose ids are of another model is marked (header, chat list) and its next turn is tokenized
afresh (tui/turns.py), so no KV crosses models (the block hashes carry the model's fingerprint anyway).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ...core.weights.catalog import RECENT_SETTING, ModelChoice, model_choices, parse_recent, remember
from ..bridge import one_line

if TYPE_CHECKING:
    from ...core.config import EngineConfig
    from ...core.weights.inventory import ModelEntry
    from ...core.chats.store import ChatStore
    from ..app import LlmChatApp
    from ..session import ChatSession


def remember_model(store: "ChatStore", model: str | None) -> None:
    """Put a --model path first in the recently used list (the default model needs no entry)."""
    if model is not None:
        store.set_setting(RECENT_SETTING, json.dumps(remember(parse_recent(store.get_setting(RECENT_SETTING)), model)))


def of_another_model(session: "ChatSession", loaded_model_id: str | None) -> bool:
    """True when the chat's token ids are of a model other than the one loaded (unknown on either side: no)."""
    chat_model = session.conversation.model_id
    return chat_model is not None and loaded_model_id is not None and chat_model != loaded_model_id


def open_model_picker(app: "LlmChatApp") -> None:
    from ...core.weights.resolve import DEFAULT_GGUF_NAME, cache_dir
    from ..screens.model_picker import ModelPickerScreen

    why_not = why_not_switch(app)
    if why_not is not None:
        app.notify(why_not, severity="warning")
        return
    from ...core.weights.inventory import list_models

    recent = parse_recent(app.store.get_setting(RECENT_SETTING))
    entries, _ = list_models()
    choices = model_choices(cache_dir(), DEFAULT_GGUF_NAME, recent, [(e.name, e.source) for e in entries])
    choices = with_memory(choices, entries, app.engine_config, app.loaded_model)
    app.push_screen(ModelPickerScreen(choices, app.loaded_model), lambda choice: switch_model(app, choice))


def _entry_of(choice: ModelChoice, by_name: dict, by_path: dict) -> "ModelEntry | None":
    from pathlib import Path

    from ...core.weights.errors import ModelLoadError
    from ...core.weights.inventory import describe

    if choice.model is None:
        return by_name.get("default")
    found = by_name.get(choice.model) or by_path.get(choice.model)
    if found is None and Path(choice.model).expanduser().exists():
        try:
            found = describe(Path(choice.model).expanduser(), choice.model)
        except (ModelLoadError, OSError):
            return None
    return found


def with_memory(choices: list[ModelChoice], entries: list, config: "EngineConfig | None",
                loaded: str | None) -> list[ModelChoice]:
    """Each choice with its size and memory needed against the memory free once the loaded model is unloaded."""
    from dataclasses import replace
    from pathlib import Path

    from ...core.weights.memory import available_memory_bytes, bytes_per_param, memory_needed, weight_bytes
    from ..text.format import nbytes

    device = (config.device if config else None) or "cpu"

    def needs(entry: "ModelEntry") -> int | None:
        per_param = bytes_per_param(config.weight_dtype if config else None, config.dtype if config else None,
                                    device, Path(entry.path).is_file())  # (a file is a GGUF, a folder safetensors)
        return memory_needed(entry, per_param, kv_bytes)

    if config is not None and config.kv_cache_bytes:
        kv_bytes = config.kv_cache_bytes
    else:
        from ...core.engine.kv_cache import default_kv_cache_bytes

        kv_bytes = default_kv_cache_bytes(device)
    by_name = {e.name: e for e in entries}
    by_path = {e.path: e for e in entries}
    found = [_entry_of(c, by_name, by_path) for c in choices]
    free = available_memory_bytes()
    current = next((e for c, e in zip(choices, found) if c.model == loaded), None)
    if free is not None and current is not None:  # switching unloads it first: its weights come back, and
        # only they (the KV budget is a ceiling: pages never written were never taken from what is free)
        free += weight_bytes(current, bytes_per_param(config.weight_dtype if config else None,
                                                      config.dtype if config else None, device,
                                                      Path(current.path).is_file())) or 0
    out = []
    for choice, entry in zip(choices, found):
        needed = needs(entry) if entry else None
        if entry is None or needed is None:
            out.append(replace(choice, detail=(entry.problem or "") if entry else ""))
            continue
        fits = free is None or needed <= free
        detail = (f"{entry.quantization or '?'} · {nbytes(entry.size_bytes)} on disk · needs ~{nbytes(needed)}"
                  + (f" of {nbytes(free)} free" if free is not None else "") + ("" if fits else " · won't fit"))
        out.append(replace(choice, detail=detail, fits=fits))
    return out


def why_not_switch(app: "LlmChatApp") -> str | None:
    if app.model_factory is None:
        return "The model is the server's (--backend): switch it there."
    if app.switching_model:
        return "A model is loading already; wait for it."
    if any(s.busy for s in app.sessions.values()):
        return "A reply is streaming: stop it (Esc) or let it finish, then switch the model."
    return None


def switch_model(app: "LlmChatApp", choice: ModelChoice | None) -> None:
    """Unload the engine and load `choice` in a worker thread (the old model again if that fails)."""
    if choice is None or why_not_switch(app) is not None:
        return
    factory = app.model_factory(choice.model)
    app.switching_model = True
    app.chat_screen.show_engine_loading(f"switching to {choice.label}: unloading the current model…")

    def work() -> None:
        bridge = app.bridge
        bridge.unload()
        try:
            bridge.load(factory)
        except Exception as e:  # a bad file, a model this engine cannot run, out of memory...
            app.call_from_thread(app.notify, f"Could not load {choice.label}: {one_line(e)}; going back to the "
                                 "model loaded before.", severity="error", timeout=10, markup=False)
            bridge.start()  # the old factory: EngineReady (or EngineFailed) as at start
        else:
            app.call_from_thread(app.saved, remember_model, app.store, choice.model, what="the recent models")
            app.loaded_model = choice.model
        finally:
            app.switching_model = False
            app.call_from_thread(app.refresh_chat_list)

    app.run_worker(work, thread=True, group="engine", exit_on_error=False, description="switch the model")
