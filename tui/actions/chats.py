"""The app's actions on chats (new, switch, stop, rename, delete, settings, export, copy, theme, panels)
and their command-palette entries. A mixin of LlmChatApp: it uses the app's store, sessions and screen."""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

from textual.app import SystemCommand
from textual.screen import Screen

from ...core.chats.exchange import ChatImportError, read_chat_file
from ...core.chats.conversation import ChatSettings
from ..commands.config import chat_defaults
from ..text.key_bindings import keys_now
from .registry import ACTIONS, palette_help
from ...core.text.sanitize import safe_text
from ..screens.dialogs import ConfirmScreen, SettingsScreen, TextPromptScreen
from ..session import ChatSession
from .chat_summary import cancel_summary
from .mixin import AppMixin


THEMES = ("textual-dark", "textual-light")



class ChatActions(AppMixin):
    async def action_new_chat(self) -> None:
        current = self.current
        if current is not None and not current.conversation.messages and not current.busy:
            self.chat_screen.prompt.focus()  # already on an empty chat
            return
        settings = current.settings if current else ChatSettings()
        record = self.new_record(chat_defaults(self.user_config, settings))  # (the file's defaults win)
        self.sessions[record.chat_id] = ChatSession(record)
        await self.refresh_chat_list()
        await self.open_chat(record.chat_id)

    async def action_switch(self, step: int) -> None:
        ordered = [s.chat_id for s in self.ordered_sessions()]
        if self.current_id in ordered and len(ordered) > 1:
            await self.open_chat(ordered[(ordered.index(self.current_id) + step) % len(ordered)])

    def action_stop(self) -> None:
        if cancel_summary(self):  # a full chat's summary being written (tui/actions/chat_summary.py)
            return
        session = self.current
        if session is not None and self.turns.cancel(session):
            self.notify("Stopping the reply; what it wrote so far is kept.", timeout=2)

    def action_import_chat(self) -> None:
        screen = TextPromptScreen("Import a chat from this file (an llmchat JSON or Markdown export)", "")
        self.push_screen(screen, self.import_chat_file)

    async def import_chat_file(self, path: str | None) -> None:
        """The whole file is checked first; a bad one is one line, and nothing is stored."""
        if not path or not path.strip():
            return
        try:
            record = self.store.add_chat(read_chat_file(Path(path.strip()).expanduser()))
        except (ChatImportError, ValueError) as e:  # (ValueError: settings no turn can use)
            self.notify(f"{safe_text(path.strip())}: {safe_text(str(e))}; nothing imported", severity="error")
            return
        except sqlite3.Error as e:  # a full or read-only disk: the file stays where it is
            self.tell_not_saved(f"Could not import into {self.store.path}: {e}; nothing imported")
            return
        self.sessions[record.chat_id] = ChatSession(record)
        await self.refresh_chat_list()
        await self.open_chat(record.chat_id)
        self.notify(f"Imported chat #{record.chat_id} ({len(record.messages)} messages)", timeout=3)

    def action_rename(self) -> None:
        session = self.current
        if session is not None:
            screen = TextPromptScreen(f"Rename chat #{session.chat_id}", session.conversation.title)
            self.push_screen(screen, lambda title: self.rename_chat(session, title))

    def rename_chat(self, session: ChatSession, title: str | None) -> None:
        if title is None:
            return
        try:
            self.saved(session.conversation.rename, title, what="the new title")  # (kept in memory if not)
        except ValueError as e:
            self.notify(str(e), severity="error")
            return
        self.chat_screen.chat_list.refresh_chat(session.chat_id)
        self.show_header()

    def action_delete(self) -> None:
        session = self.current
        if session is None:
            return
        busy = " Its reply in progress will be stopped." if session.busy else ""
        question = (f"Delete chat #{session.chat_id} “{session.conversation.title}” and its "
                    f"{len(session.conversation.messages)} messages?{busy} This cannot be undone.")
        self.push_screen(ConfirmScreen(safe_text(question), yes="Delete"),
                         lambda yes: self.delete_chat(session) if yes else None)

    async def delete_chat(self, session: ChatSession) -> None:
        if session.chat_id not in self.sessions:
            return
        if session.conversation.store is not None:  # (a chat kept in memory only has no row)
            try:
                self.store.delete_chat(session.chat_id)
            except sqlite3.Error as e:  # rolled back: the chat is still in the file, so it stays here too
                self.tell_not_saved(f"Could not delete chat #{session.chat_id} from {self.store.path}: {e}. "
                                    "It is kept.")
                return
        self.turns.cancel(session)
        del self.sessions[session.chat_id]
        self.drafts.pop(session.chat_id, None)
        if self.current_id == session.chat_id:
            self.current_id = None
            self.chat_screen.prompt.clear_message()
        if not self.sessions:
            record = self.new_record(session.settings)
            self.sessions[record.chat_id] = ChatSession(record)
        await self.refresh_chat_list()
        if self.current_id is None:
            await self.open_chat(self.ordered_sessions()[0].chat_id)
        self.show_engine_panels()
        self.notify(f"Deleted chat #{session.chat_id}", timeout=2)

    def action_settings(self) -> None:
        session = self.current
        if session is not None:
            screen = SettingsScreen(f"#{session.chat_id}", session.settings)
            self.push_screen(screen, lambda settings: self.save_settings(session, settings))

    def save_settings(self, session: ChatSession, settings: ChatSettings | None) -> None:
        if settings is None or session.chat_id not in self.sessions:
            return
        try:
            stored = self.saved(session.conversation.update_settings, settings, what="the settings")
        except ValueError as e:  # (the dialog checks them first: this is a last guard)
            self.notify(str(e), severity="error", markup=False)
            return
        self.show_header()
        if stored:
            self.notify("Settings saved; they apply from the next message.", timeout=2)

    def action_export(self) -> None:
        from ..commands.export import export_chat

        session = self.current
        if session is None:
            return
        try:
            paths = export_chat(session.conversation, self.store.data_dir / "exports")
        except OSError as e:
            self.notify(f"Could not export: {e}", severity="error")
            return
        self.notify("Exported to " + " and ".join(str(p) for p in paths), timeout=6)

    def action_copy_reply(self) -> None:
        session = self.current
        replies = [m for m in session.conversation.messages if m.role == "assistant"] if session else []
        if not replies:
            self.notify("No reply to copy yet", severity="warning")
            return
        self.copy_to_clipboard(replies[-1].content)
        self.notify(f"Copied the last reply ({len(replies[-1].content):,} characters)", timeout=2)

    def action_search_chats(self) -> None:
        from ..screens.search import SearchScreen

        if self.screen is not self.chat_screen:  # (not over a dialog, nor over itself)
            return
        screen = SearchScreen(self.store, self.last_search_text)
        self.push_screen(screen, lambda hit: self.open_search_hit(hit, screen.last_text))

    async def open_search_hit(self, hit, text: str) -> None:
        """Open the hit's chat scrolled to its message, which gets the focus (c copies it, Tab moves on)."""
        self.last_search_text = text
        if hit is None or hit.chat_id not in self.sessions:
            return
        await self.open_chat(hit.chat_id)
        if not self.chat_screen.transcript.focus_message(hit.message_id):
            self.notify("That message is no longer in the chat", severity="warning")

    def action_switch_model(self) -> None:
        from .model_switch import open_model_picker

        open_model_picker(self)

    def action_compose_in_editor(self) -> None:
        from .editor import compose_in_editor

        compose_in_editor(self)

    def action_toggle_theme(self) -> None:
        self.theme = THEMES[1] if self.theme == THEMES[0] else THEMES[0]

    def watch_theme(self, theme: str) -> None:
        if self.is_running:
            self.saved(self.store.set_setting, "theme", theme, what="the theme")  # (the theme applies anyway)

    def action_toggle_panels(self) -> None:
        """Show or hide the panels (hidden by default below 130 columns, where the conversation needs the room)."""
        screen = self.chat_screen
        shown = screen.panels.display
        screen.set_class(not shown, "-panels-shown")
        screen.set_class(shown, "-panels-hidden")

    def action_toggle_reasoning(self) -> None:
        if not self.chat_screen.transcript.toggle_reasoning(self.focused):
            self.notify("No reply in this chat has a reasoning block", timeout=2)

    async def action_toggle_drafts(self) -> None:
        self.mark_drafts = not self.mark_drafts
        await self.chat_screen.transcript.show(self.current)
        if self.mark_drafts:
            self.notify("Replies as plain text; underlined: tokens drafted by speculative decoding and kept by the "
                        "model (replies streamed in this run). F6 again: Markdown.", timeout=6)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        keys = keys_now(dict(self._keymap))  # (a key the config file moved)
        for a in ACTIONS:
            if a.palette:
                yield SystemCommand(a.title, palette_help(a, keys), lambda action=a.action: self.run_action(action))
        for s in self.ordered_sessions():
            yield SystemCommand(f"Open chat #{s.chat_id}: {safe_text(s.conversation.title)}", "switch to this chat",
                                lambda chat_id=s.chat_id: self.open_chat(chat_id))
