"""LlmChatApp: chats on the left, the conversation in the middle, the engine's panels on the right.

The app owns the store (chats on disk), the bridge (the engine, loaded in a worker thread so the UI paints
at once) and one ChatSession per chat; it routes engine messages to the turn manager and keeps the screen
current. Its actions and turn views are mixins in tui/actions/; `llmchat` starts it from tui/run.py.
"""
from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import App
from textual.css.query import NoMatches

from ..core.chats.conversation import ChatSettings
from ..core.chats.store import ChatStore
from .actions.chats import THEMES, ChatActions
from .actions.store_writes import StoreWrites, skipped_notice
from .bridge import EngineBridge, default_engine_factory
from .commands.config import chat_defaults, start_theme
from .text.key_bindings import apply_config_keys
from .actions.cache_ops import ChatOps
from .actions.registry import app_bindings
from .actions.model_switch import remember_model
from .actions.cost_preview import CostPreviewView
from .actions.turn_views import TurnViews
from .actions.chat_summary import apply_summary_events
from .messages import (
    EngineEventsPending, EngineFailed, EngineProgress, EngineReady, PrefixTiersReported, ResidentBlocks)
from .screens.chat import ChatScreen
from .session import ChatSession
from .turns import TurnManager
from .widgets.chat_list import ChatList

if TYPE_CHECKING:
    from ..core.config import EngineConfig
    from ..core.user_config import UserConfig
    from .bridge import EngineFactory

STATS_INTERVAL_S = 0.25  # panels refresh at 4 Hz at most
RESIDENT_INTERVAL_S = 1.0  # the per-chat KV breakdown is asked of the engine once a second at most
NUM_CHATS_IN_KV_PANEL = 8
STREAM_INTERVAL_S = 1 / 20  # the streaming reply on screen grows at 20 frames per second at most


class LlmChatApp(CostPreviewView, TurnViews, ChatOps, ChatActions, StoreWrites, App):
    CSS_PATH = "app.tcss"
    TITLE = "llmchat"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (90, "-medium"), (130, "-wide")]  # panels need room: Ctrl+B shows them
    BINDINGS = app_bindings()  # (tui/actions/registry.py: each with an id the config file's [keys] can move)

    def __init__(self, data_dir: Path | str, engine_factory: "EngineFactory | None" = None, *,
                 model: str | None = None, engine_config: "EngineConfig | None" = None,
                 user_config: "UserConfig | None" = None, config_problem: str | None = None) -> None:
        super().__init__()
        self.store = ChatStore(data_dir)  # DataDirInUse if another llmchat has it; ChatsFileDamaged (tui/run.py)
        self.startup_problems: list[str] = []  # one notice each once the screen is up
        self.model_factory = None  # --model path (None: the default) -> its engine factory; None: no switching
        self.loaded_model = model  # the --model loaded (tui/actions/model_switch.py)
        self.switching_model = False
        self.typeahead = True  # prefill a draft while it is typed (tui/actions/cost_preview.py; --no-typeahead)
        self.engine_config: "EngineConfig | None" = engine_config
        if engine_factory is None:
            from ..core.config import EngineConfig

            config = engine_config or EngineConfig()
            self.engine_config = config  # (the picker sizes models with its weight format and KV budget)
            self.model_factory = lambda m: default_engine_factory(replace(config, model=m))
            self.loaded_model = model if model is not None else config.model
            engine_factory = self.model_factory(self.loaded_model)
            try:
                remember_model(self.store, self.loaded_model)  # (the picker lists recently used paths)
            except sqlite3.Error as e:  # a full or read-only disk: the app still starts
                self.startup_problems.append(f"Could not save to {self.store.path}: {e}")
        self.bridge = EngineBridge(self, engine_factory)
        self.turns = TurnManager(self.store, self.bridge, self.post_message)
        self._next_frame = 0.0
        self._last_write_error = -1e9
        self.sessions: dict[int, ChatSession] = {}
        self.current_id: int | None = None
        self.drafts: dict[int, str] = {}
        self.mark_drafts = False  # replies as plain text with kept speculative drafts underlined (F6)
        self.last_search_text = ""  # what the search screen (Ctrl+F) had when it closed: it opens with it again
        self._last_stats = None
        self._shut_down = False
        self.exiting = False  # exit() was called (Ctrl+Q, or a test's run_test ending)
        self.resident: dict[int, tuple[int, ...]] = {}  # chat id -> KV blocks holding its cached prefix
        self.cache_checks: dict = {}  # chat id -> its last CacheCheck (Verify cache)
        self.summary_run = None  # the full chat's summary being written (tui/actions/chat_summary.py)
        self.pinned_chats: set[int] = set()  # chats whose KV blocks are pinned (tui/actions/pin_chat.py)
        self.prefix_tiers: dict = {}  # chat id -> metrics.PrefixTiers (resident / disk only), where the backend tells
        self._resident_asked = 0.0
        self.chat_screen = ChatScreen()
        self.user_config = user_config  # the config file's settings (None: none read)
        theme, theme_problem = start_theme(user_config, self.available_themes,
                                           self.store.get_setting("theme", THEMES[0]) or THEMES[0])
        self.config_problems = [p for p in (config_problem, theme_problem, *self.startup_problems) if p]
        self.theme = theme
        self.config_problems += apply_config_keys(self, user_config)  # a bad [keys] entry: its default stays

    # -- start ------------------------------------------------------------------------------
    async def on_mount(self) -> None:
        await self.push_screen(self.chat_screen)
        self.run_worker(self.bridge.start, thread=True, group="engine", exit_on_error=False,
                        description="load the model and start the engine")
        skipped = self.load_sessions()  # a chat with damaged rows is skipped (one notice), the others open
        for problem in self.config_problems:  # a malformed config file: one line, the app on its defaults
            self.notify(problem, severity="warning", timeout=10)
        if skipped:
            self.notify(skipped_notice(skipped), severity="warning", timeout=15, markup=False)
        if not self.sessions:
            record = self.new_record(chat_defaults(self.user_config, ChatSettings()))
            self.sessions[record.chat_id] = ChatSession(record)
        await self.chat_screen.chat_list.show(self.ordered_sessions(), None)
        await self.open_chat(self.ordered_sessions()[0].chat_id)
        self.set_interval(STATS_INTERVAL_S, self.refresh_live)
        self.set_interval(STREAM_INTERVAL_S, self.stream_frame)

    def ordered_sessions(self) -> list[ChatSession]:
        return sorted(self.sessions.values(), key=lambda s: (s.conversation.updated_at, s.chat_id), reverse=True)

    @property
    def current(self) -> ChatSession | None:
        return self.sessions.get(self.current_id) if self.current_id is not None else None

    # -- engine messages --------------------------------------------------------------------
    def on_engine_progress(self, msg: EngineProgress) -> None:
        self.chat_screen.show_progress(msg.line)

    def on_engine_ready(self, msg: EngineReady) -> None:
        for session in self.ordered_sessions()[:NUM_CHATS_IN_KV_PANEL]:  # chats from an earlier run: where is their KV?
            self.bridge.remember(session.chat_id, list(session.conversation.token_ids))
        self.chat_screen.show_engine_ready(msg.info)
        self.chat_screen.chat_list.show_loaded_model(msg.info.model_id)  # (marks the chats of another model)
        self.show_header()
        self.notify(f"{msg.info.model_name} ready ({msg.info.load_seconds:.1f} s)", timeout=3)

    def on_engine_failed(self, msg: EngineFailed) -> None:
        self.chat_screen.show_engine_failed(msg.error)

    @property
    def ui_alive(self) -> bool:
        """False once the app is closing: the widgets may be gone, events only update the store."""
        return self.is_running and not self.exiting and not self.turns.closing and self.chat_screen.is_attached

    def exit(self, *args, **kwargs) -> None:
        self.exiting = True  # from here on the screens come down: no more UI updates
        super().exit(*args, **kwargs)

    async def guarded(self, awaitable) -> None:
        """Await a UI update that may meet widgets already gone because the app is closing meanwhile."""
        try:
            await awaitable
        except NoMatches:
            if self.ui_alive:
                raise

    async def on_engine_events_pending(self, msg: EngineEventsPending) -> None:
        items = self.bridge.drain()
        self.turns.apply(items)  # (it skips the summary's events: no turn has its handle)
        await apply_summary_events(self, items)

    async def stream_frame(self) -> None:
        """Show the current chat's newly streamed text: one Markdown append per frame, not per token, and
        fewer frames when rendering is slow (a frame waits twice as long as the last one took)."""
        session = self.current
        now = time.monotonic()
        if session is None or session.turn is None or not self.ui_alive or now < self._next_frame:
            return
        view = self.chat_screen.transcript.reply_view(session.turn.reply)
        if view is not None:
            await self.guarded(view.show_upto(session.turn))
            self._next_frame = now + 2 * (time.monotonic() - now)

    def refresh_live(self) -> None:
        """4 Hz: engine panels (if the snapshot changed) and the streaming chats' progress."""
        if not self.ui_alive:
            return
        screen = self.chat_screen
        stats = self.bridge.stats()
        busy = [s for s in self.sessions.values() if s.busy]
        if stats is not self._last_stats or busy:
            self._last_stats = stats
            self.show_engine_panels()
            self.ask_resident_blocks()
        for session in busy:
            screen.chat_list.refresh_chat(session.chat_id)
        current = self.current
        if current is not None and current.busy:
            from .widgets.transcript import live_text

            view = screen.transcript.reply_view(current.turn.reply)
            if view is not None:
                view.set_live(live_text(current))
            handle = current.turn.handle
            live = stats.request(handle.request_id) if stats is not None and handle is not None else None
            screen.panels.show_chat(current, live)
            self.show_header()

    def show_engine_panels(self) -> None:
        sessions = self.ordered_sessions()[:NUM_CHATS_IN_KV_PANEL]
        self.chat_screen.panels.show_engine(self.bridge.stats(), sessions, self.resident, self.prefix_tiers)

    def ask_resident_blocks(self, force: bool = False) -> None:
        now = time.monotonic()
        if now - self._resident_asked < RESIDENT_INTERVAL_S and not force:
            return
        if self.bridge.request_residency():
            self._resident_asked = now

    async def ask_resident_blocks_now(self) -> None:
        """Ask now and wait for the answer (for tests and snapshots)."""
        if self.bridge.service is not None:
            self.resident = await asyncio.wrap_future(self.bridge.service.residency())
            self.show_engine_panels()

    def on_resident_blocks(self, msg: ResidentBlocks) -> None:
        self.resident = msg.blocks
        if self.ui_alive:
            self.show_engine_panels()

    def on_prefix_tiers_reported(self, msg: PrefixTiersReported) -> None:
        self.prefix_tiers = msg.tiers
        if self.ui_alive:
            self.show_engine_panels()

    # -- UI events --------------------------------------------------------------------------
    async def on_list_view_selected(self, msg: ChatList.Selected) -> None:
        item = msg.item
        if item is not None and hasattr(item, "session"):
            await self.open_chat(item.session.chat_id)

    # -- chats ------------------------------------------------------------------------------
    async def open_chat(self, chat_id: int) -> None:
        screen = self.chat_screen
        prompt = screen.prompt
        if self.current_id is not None and self.current_id != chat_id:
            self.drafts[self.current_id] = prompt.message_text()
            prompt.set_message(self.drafts.pop(chat_id, ""))
        self.current_id = chat_id
        session = self.sessions[chat_id]
        await screen.transcript.show(session)
        screen.chat_list.mark_current(chat_id)
        screen.show_banner(session.banner)
        screen.panels.show_chat(session)
        self.show_header()
        prompt.focus()
        self.warm_on_focus(session)
        self.ask_cost_preview()  # this chat's draft, and its room left in the context

    async def refresh_chat_list(self) -> None:
        await self.chat_screen.chat_list.show(self.ordered_sessions(), self.current_id)

    def show_header(self) -> None:
        info = self.bridge.info
        self.chat_screen.show_header(self.current, info.context_length if info else None,
                                     info.model_id if info else None)

    # -- quit -------------------------------------------------------------------------------
    async def action_quit(self) -> None:
        await self.shutdown()
        self.exit()

    async def shutdown(self) -> None:
        """Stop the engine and store every reply in flight as far as it got; runs once."""
        if self._shut_down:
            return
        self._shut_down = True
        await self.turns.close()
        self.store.close()

    async def on_unmount(self) -> None:
        await self.shutdown()
