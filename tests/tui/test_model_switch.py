"""Switch model from the app (palette: Switch model): the picker lists the recently used --model paths and the
cache dir's models; switching unloads the engine before loading the next (one model at a time); chats keep
their ids, a chat of another model is marked, and its next turn reuses nothing across models (0 cached
tokens, with the disk tier on); a model that fails to load is one line and the one before is loaded again."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tui_helpers import SIZE, one_turn, press, quit_app, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.weights.errors import ModelLoadError
from llmchat.core.weights.catalog import RECENT_SETTING, cached_models, model_choices, parse_recent, remember
from llmchat.core.chats.store import ChatStore
from llmchat.tui.app import LlmChatApp
from llmchat.tui.screens.model_picker import ModelPickerScreen

GREEDY = ChatSettings(None, 0.0, 1.0, 8)


def engines(models: dict, tmp_path):
    """name -> factory building the real engine (disk tier on) on that model; each checks that every engine
    built before it has stopped (one model at a time)."""
    services = []

    def factory_of(name):
        def factory(progress, sink):
            from llmchat.core.config import EngineConfig
            from llmchat.core.engine.engine import LLMEngine
            from llmchat.core.backends.service import EngineService

            assert all(not s._thread.is_alive() for s in services), "the previous engine still runs"
            progress(f"building the {name} test engine")
            if models[name] is None:
                raise ModelLoadError(f"{name} is not a model this engine can run")
            config = EngineConfig(max_num_seqs=8, kv_cache_bytes=4 << 20, kv_disk_bytes=64 << 20,
                                  kv_disk_dir=str(tmp_path / "kv"))
            services.append(EngineService(LLMEngine(models[name], config), sink))
            return services[-1]
        return factory

    return factory_of, services


async def pick(pilot, label: str) -> None:
    """Palette -> Switch model -> the option whose text starts with `label`."""
    app = pilot.app
    await press(pilot, "ctrl+p", *"Switch model")
    await pilot.pause(0.3)
    await press(pilot, "enter")
    await wait_for(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
    options = app.screen.query_one("#models")
    index = next(i for i, c in enumerate(app.screen.choices) if c.label.startswith(label))
    options.highlighted = index
    await press(pilot, "enter")


async def test_switching_models_keeps_chats_marks_them_and_reuses_nothing_across_models(
        tmp_path, chatty_model, tiny_model):
    factory_of, services = engines({"chatty": chatty_model, "tiny": tiny_model, "broken": None}, tmp_path)
    paths = {name: tmp_path / f"{name}.gguf" for name in ("tiny", "broken")}
    for p in paths.values():
        p.write_bytes(b"GGUF")
    app = LlmChatApp(tmp_path / "data", factory_of("chatty"))
    app.model_factory = lambda model: factory_of(Path(model).stem if model else "chatty")
    app.store.set_setting(RECENT_SETTING, json.dumps([str(paths["broken"]), str(paths["tiny"])]))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        chatty_id = app.bridge.info.model_id
        chat = app.current
        await one_turn(pilot, "Tell me about paged attention and block tables", GREEDY)
        await one_turn(pilot, "And about prefix caching", GREEDY)
        assert chat.conversation.model_id == chatty_id
        assert chat.conversation.messages[-1].metrics.num_cached_tokens > 0  # same model: its prefix is reused
        ids_of_chatty = list(chat.conversation.token_ids)

        await pick(pilot, str(paths["tiny"]))
        await wait_for(pilot, lambda: app.bridge.ready and app.bridge.info.model_id != chatty_id)
        assert len(services) == 2 and not services[0]._thread.is_alive()  # the first engine is gone
        assert chat.conversation.token_ids == ids_of_chatty  # the chat keeps its ids
        await wait_for(pilot, lambda: "from another model" in screen_text(app))
        assert "other model" in screen_text(app)  # (the chat list too)

        await one_turn(pilot, "And about prefix caching", GREEDY)
        metrics = chat.conversation.messages[-1].metrics
        assert metrics.num_cached_tokens == 0  # nothing of the other model's KV, memory or disk
        assert chat.conversation.model_id == app.bridge.info.model_id
        await wait_for(pilot, lambda: "from another model" not in screen_text(app))
        with ChatStore(tmp_path / "data", readonly=True) as store:
            assert store.load_chat(chat.chat_id).model_id == app.bridge.info.model_id
        tiny_id = app.bridge.info.model_id

        await pick(pilot, str(paths["broken"]))  # fails: one line, the model before is loaded again
        await wait_for(pilot, lambda: any("Could not load" in n.message for n in app._notifications))
        await wait_for(pilot, lambda: app.bridge.ready)
        failure = next(n.message for n in app._notifications if "Could not load" in n.message)
        assert "broken is not a model this engine can run; going back to the model loaded before" in failure
        assert "\n" not in failure and app.bridge.info.model_id == tiny_id and len(services) == 3
        assert parse_recent(app.store.get_setting(RECENT_SETTING))[0] == str(paths["tiny"])  # (it loaded)
        await quit_app(pilot)


async def test_no_switch_while_a_reply_streams_or_with_a_server_backend(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)

        def said(text):
            return any(text in n.message for n in app._notifications)

        await app.run_action("switch_model")  # a factory given from outside (as --backend's): no switching
        await wait_for(pilot, lambda: said("The model is the server's (--backend): switch it there."))
        app.model_factory = lambda model: pytest.fail("no model may load while a reply streams")
        chat = app.current
        chat.conversation.settings = ChatSettings(None, 0.0, 1.0, 900)
        app.chat_screen.prompt.load_text("a long reply please")
        await press(pilot, "enter")
        await wait_for(pilot, lambda: chat.busy)
        await app.run_action("switch_model")
        await wait_for(pilot, lambda: said("A reply is streaming: stop it (Esc)"))
        assert not isinstance(app.screen, ModelPickerScreen) and app.bridge.ready
        await press(pilot, "escape")
        await quit_app(pilot)


def test_the_catalog_lists_the_cache_dirs_models_and_recent_paths(tmp_path):
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    for name in ("Default.gguf", "other.gguf"):
        (cache / "models" / name).write_bytes(b"GGUF")
    elsewhere = tmp_path / "elsewhere.gguf"
    elsewhere.write_bytes(b"GGUF")
    for digest in ("a" * 16, "b" * 16, "c" * 16):
        (cache / "converted" / digest).mkdir(parents=True)
        (cache / "converted" / digest / "config.json").write_text("{}")
    (cache / "converted" / "sources.json").write_text(json.dumps({
        str(elsewhere): {"sha256": "a" * 64}, str(tmp_path / "gone.gguf"): {"sha256": "b" * 64},
        str(cache / "models" / "other.gguf"): {"sha256": "c" * 64}}))
    listed = [(c.label, c.model) for c in cached_models(cache, "Default.gguf")]
    assert listed == [("other.gguf", str(cache / "models" / "other.gguf")),
                      ("elsewhere.gguf", str(elsewhere)),
                      (f"{'b' * 16} (converted; its source is gone)", str(cache / "converted" / ("b" * 16)))]
    recent = remember(remember(remember([], str(elsewhere)), str(tmp_path / "missing")), str(elsewhere))
    assert recent == [str(elsewhere), str(tmp_path / "missing")]
    choices = model_choices(cache, "Default.gguf", recent)
    assert [(c.model, c.where) for c in choices] == [
        (None, "default"), (str(elsewhere), "recent"), (str(cache / "models" / "other.gguf"), "cache"),
        (str(cache / "converted" / ("b" * 16)), "cache")]  # a missing recent path is left out, none twice
    assert parse_recent("not json") == [] and parse_recent('["a", 3, ""]') == ["a"]
    assert len(remember([f"p{i}" for i in range(20)], "new")) == 10


async def test_the_picker_lists_other_stores_with_memory_needed_and_marks_what_wont_fit(make_app, tmp_path,
                                                                                         monkeypatch):
    from model_files import ollama_store, write_tiny_gguf

    from llmchat.core.config import EngineConfig

    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    # a cache dir whose converted/ is empty: the models other tests converted would push the entry off the screen
    cache = tmp_path / "cache"
    (cache / "converted").mkdir(parents=True)
    for name in ("models", "kernels"):
        (cache / name).symlink_to(Path(os.environ["LLMCHAT_CACHE_DIR"]) / name, target_is_directory=True)
    monkeypatch.setenv("LLMCHAT_CACHE_DIR", str(cache))
    ollama_store(tmp_path / "ollama", "tiny", "1b", write_tiny_gguf(tmp_path / "t.gguf", file_type=7))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.bridge.ready)
        app.model_factory = lambda model: pytest.fail("nothing is picked here")
        app.loaded_model = "a model not on the list"  # (the listed loaded model's memory counts as free: none here)
        for kv_bytes, fits in ((1 << 20, True), (10 ** 15, False)):  # a KV budget no machine has: nothing fits
            app.engine_config = EngineConfig(kv_cache_bytes=kv_bytes)
            await app.run_action("switch_model")
            await wait_for(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
            tiny = next(c for c in app.screen.choices if c.model == "ollama:tiny:1b")
            assert tiny.where == "ollama" and tiny.fits is fits
            assert tiny.detail.startswith("Q8_0 · ") and " free" in tiny.detail
            assert ("won't fit" in tiny.detail) is not fits
            await wait_for(pilot, lambda: "ollama:tiny:1b" in screen_text(app))
            assert ("won't fit" in screen_text(app)) is not fits
            await press(pilot, "escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, ModelPickerScreen))
        await quit_app(pilot)


def test_switching_frees_the_loaded_models_weights_not_its_kv_budget(tmp_path, monkeypatch):
    """The KV budget is a ceiling (pages never written were never taken), so unloading the loaded model gives back
    its weights only: a model that needs weights + a budget larger than what is free does not fit, whatever the
    loaded model's budget."""
    from model_files import write_tiny_gguf

    from llmchat.core.config import EngineConfig
    from llmchat.core.weights import memory
    from llmchat.core.weights.catalog import ModelChoice
    from llmchat.core.weights.inventory import describe
    from llmchat.tui.actions.model_switch import with_memory

    loaded = describe(write_tiny_gguf(tmp_path / "loaded.gguf"), "loaded.gguf")
    other = describe(write_tiny_gguf(tmp_path / "other.gguf"), "other.gguf")
    mb = 1 << 20
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 1000 * mb)
    choices = [ModelChoice("loaded", "loaded.gguf", "recent"), ModelChoice("other", "other.gguf", "recent")]
    for kv_mb, fits in ((900, True), (1200, False)):
        out = with_memory(choices, [loaded, other], EngineConfig(kv_cache_bytes=kv_mb * mb), "loaded.gguf")
        assert out[1].fits is fits, out[1].detail
