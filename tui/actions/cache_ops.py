"""Chat operations that reuse the KV cache: regenerate, edit and resend (the old branch kept as a fork),
fork at a message, undo the last turn; and the cache views: why a reply reused what it did, the block map,
the exactness check, the misconceptions screen. A mixin of LlmChatApp, like tui/actions/chats.py.

Each operation keeps the exact token ids before the message it changes (core/chats/conversation.py: cut_at,
drop_last_reply, branch), so the next prompt hits every full block before that point.
"""
from __future__ import annotations

import sqlite3

from ...core.chats.conversation import Message
from ...core.chats.origin import ChatOrigin
from ..session import ChatSession
from .mixin import AppMixin




class ChatOps(AppMixin):
    def ready_chat(self) -> ChatSession | None:
        """The current chat if an operation can change it now; otherwise say why and return None."""
        session = self.current
        if session is None:
            return None
        why_not = self.turns.why_not_send(session)
        if why_not is not None:
            self.notify(why_not, severity="warning")
            return None
        return session

    def last(self, session: ChatSession, role: str) -> Message | None:
        return next((m for m in reversed(session.conversation.messages) if m.role == role), None)

    def focused_message(self) -> Message | None:
        from ..widgets.transcript import MessageView

        return self.focused.message if isinstance(self.focused, MessageView) else None

    # -- regenerate, undo -------------------------------------------------------------------
    async def action_regenerate(self) -> None:
        session = self.ready_chat()
        if session is None:
            return
        messages = session.conversation.messages
        if len(messages) < 2 or messages[-1].role != "assistant":
            self.notify("No reply to regenerate yet", severity="warning")
            return
        user = messages[-2]
        removed = messages[-1]
        self.saved(session.conversation.drop_last_reply, what="the regenerate")  # (memory changes even if not)
        for message in (removed, user):  # the new turn shows both again
            await self.chat_screen.transcript.remove_message(message)
        if not self.turns.resend(session):
            await self.chat_screen.transcript.show(session)

    async def action_undo_turn(self) -> None:
        session = self.ready_chat()
        user = self.last(session, "user") if session else None
        if user is None:
            if session is not None:
                self.notify("Nothing to undo", severity="warning")
            return
        await self.cut_chat(session, user)
        from ..text.format import merged_draft

        prompt = self.chat_screen.prompt
        prompt.set_message(merged_draft(user.content, prompt.message_text()))
        self.notify("Undid the last turn; its message is back in the input box.", timeout=3)

    async def cut_chat(self, session: ChatSession, message: Message) -> None:
        self.saved(session.conversation.cut_at, message, what="the shortened chat")  # (memory is cut either way)
        await self.chat_screen.transcript.show(session)
        self.chat_screen.chat_list.refresh_chat(session.chat_id)
        self.chat_screen.panels.show_chat(session)
        self.show_header()

    # -- edit and resend --------------------------------------------------------------------
    def action_edit_last(self) -> None:
        message = self.focused_message()
        session = self.current
        self.edit_message(message if message is not None and message.role == "user"
                          else self.last(session, "user") if session else None)

    def edit_message(self, message: Message | None) -> None:
        from ..screens.edit_message import EditMessageScreen

        session = self.ready_chat()
        if session is None or message is None or message not in session.conversation.messages:
            if session is not None:
                self.notify("No message to edit yet", severity="warning")
            return
        self.push_screen(EditMessageScreen(message.content),
                         lambda text: self.resend_edited(session, message, text))

    async def resend_edited(self, session: ChatSession, message: Message, text: str | None) -> None:
        """The chat is cut at `message` and continues with `text`; what followed is kept as a fork."""
        if text is None or not text.strip() or self.ready_chat() is not session:
            return
        chat = session.conversation
        fork = await self.add_fork(session, chat.messages[-1], f"{chat.title} (before edit)")
        if fork is None:  # not stored: the chat stays as it was, the edited text goes to the input box
            self.chat_screen.prompt.set_message(text)
            return
        self.notify(f"The earlier branch is kept as chat #{fork.chat_id}.", timeout=4)
        await self.cut_chat(session, message)
        if not self.turns.send(session, text):
            self.chat_screen.prompt.set_message(text)

    # -- fork -------------------------------------------------------------------------------
    async def action_fork_last(self) -> None:
        session = self.current
        message = self.focused_message() or (session.conversation.messages[-1]
                                             if session and session.conversation.messages else None)
        await self.fork_at(message)

    async def fork_at(self, message: Message | None) -> None:
        """A new chat with this chat up to `message` (its exact ids, so its next prompt reuses their blocks);
        forking at a user message copies what came before it and puts its text in the new chat's input."""
        session = self.current
        if session is None or message is None or message not in session.conversation.messages:
            self.notify("No message to fork at yet", severity="warning")
            return
        if message is session.conversation.messages[-1] and session.busy:
            self.notify("This reply is still streaming: fork once it is done.", severity="warning")
            return
        messages = session.conversation.messages
        upto = message if message.role == "assistant" else messages[messages.index(message) - 1] \
            if messages.index(message) > 0 else None
        fork = await self.add_fork(session, upto, f"{session.conversation.title} (fork)")
        if fork is None:
            return
        await self.open_chat(fork.chat_id)
        if message.role == "user":
            self.chat_screen.prompt.set_message(message.content)
        self.notify(f"Forked into chat #{fork.chat_id}", timeout=3)

    async def add_fork(self, session: ChatSession, upto: Message | None, title: str,
                       origin: ChatOrigin | None = None) -> ChatSession | None:
        """The fork as a new chat (`origin`: the full chat's choice that made it); None (one notice, nothing
        changed) when the disk refused to store it."""
        try:
            fork = ChatSession(session.conversation.branch(upto, title, origin))
        except sqlite3.Error as e:
            self.tell_not_saved(f"Could not store a fork in {self.store.path}: {e}; nothing changed.")
            return None
        if fork.conversation.store is None:  # a fork of a chat kept in memory only is kept in memory too
            fork.conversation.chat_id = self.memory_chat_id()
        self.sessions[fork.chat_id] = fork
        await self.refresh_chat_list()
        return fork

    # -- cache views ------------------------------------------------------------------------
    def action_explain_last(self) -> None:
        message = self.focused_message()
        session = self.current
        self.explain_reply(message if message is not None and message.role == "assistant"
                           else self.last(session, "assistant") if session else None)

    def explain_reply(self, message: Message | None) -> None:
        from ..text.cache_text import explanation_details
        from ..screens.info import InfoScreen

        if message is None or message.explanation is None:
            self.notify("No explanation for this reply (replies from before this start have none)",
                        severity="warning")
            return
        self.push_screen(InfoScreen("Why this reply reused what it did", explanation_details(message.explanation)))

    def action_block_map(self) -> None:
        from ..screens.block_map import BlockMapScreen

        if self.bridge.inspect is None:
            self.notify("The block map needs the in-process engine (it is not ready yet)", severity="warning")
            return
        self.push_screen(BlockMapScreen())

    def action_context_map(self) -> None:
        from .context_map import show_context_map

        show_context_map(self)

    def action_toggle_pin(self) -> None:
        from .pin_chat import toggle_pin

        toggle_pin(self)

    def action_verify_cache(self) -> None:
        from .verify_cache import start_cache_check

        start_cache_check(self)

    def copy_bandwidth(self) -> float | None:
        """This machine's copy bandwidth (GB/s), measured once and cached (blocking: call it off the UI thread)."""
        from ...core.inspect.bandwidth import copy_bandwidth_gb_s
        from ...core.weights.resolve import cache_dir

        info = self.bridge.info
        return copy_bandwidth_gb_s(cache_dir(), "cuda" if info and info.device.startswith("cuda") else "cpu")

    def action_cache_help(self) -> None:
        from ..screens.misconceptions import MisconceptionsScreen

        self.push_screen(MisconceptionsScreen())
