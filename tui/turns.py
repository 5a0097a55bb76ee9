"""One chat turn in the UI: send -> tokenize (worker) -> submit -> stream -> finish, saved as it goes.

Runs on the UI thread, except `_prepare`, which tokenizes in a thread worker. The user's message and
an empty "streaming" reply are stored at once; the reply's text and the chat's token ids are saved
every few seconds while it streams and for good when the engine's Finished event arrives, so a crash
or a close keeps the reply up to where it got.
"""
from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from llmchat.core.store import DEFAULT_TITLE, StoredMessage, title_from
from llmchat.tui.bridge import StreamItem, one_line
from llmchat.tui.messages import PromptReady
from llmchat.tui.session import Banner, ChatSession, Turn

if TYPE_CHECKING:
    from llmchat.core.chat import Chat
    from llmchat.core.events import Finished
    from llmchat.core.store import ChatSettings
    from llmchat.tui.app import LlmChatApp

SAVE_EVERY_S = 2.0
STATUS_OF_REASON = {"stop": "done", "length": "done", "abort": "stopped", "error": "error"}


class TurnManager:
    def __init__(self, app: "LlmChatApp") -> None:
        self.app = app
        self.by_handle: dict[int, ChatSession] = {}
        self.closing = False
        self._next_flush = 0.0
        self._last_write_error = -1e9

    @property
    def store(self):
        return self.app.store

    @property
    def bridge(self):
        return self.app.bridge

    # -- send -------------------------------------------------------------------------------
    def can_send(self, session: ChatSession) -> bool:
        """Whether a turn can start now; if not, a notice says why (the message stays in the box)."""
        if not self.bridge.ready:
            self.app.notify("The model is still loading; your message stays in the box.", severity="warning")
            return False
        if session.busy:
            self.app.notify("This chat is still replying: Esc stops it, Ctrl+N starts another chat.", severity="warning")
            return False
        return True

    async def send(self, session: ChatSession, text: str) -> None:
        """Start a turn (can_send must be true): store the message, tokenize in a worker, show it."""
        assert self.bridge.ready and not session.busy
        user = StoredMessage("user", text)
        reply = StoredMessage("assistant", "", status="streaming")
        chat = session.core_chat()
        try:
            with self.store.batch():
                self.store.add_message(session.chat_id, user)
                self.store.add_message(session.chat_id, reply)
        except sqlite3.Error as e:
            self._write_failed(e)
            self.app.chat_screen.prompt.set_message(text)
            return
        record = session.record
        if record.title_auto and not any(m.role == "user" for m in record.messages):
            record.title = title_from(text)
        record.messages += [user, reply]
        record.updated_at = time.time()
        session.turn = Turn(user, reply, text)
        session.banner = None
        self.app.run_worker(
            lambda: self._prepare(session.chat_id, session.turn, chat, session.settings),
            thread=True, group="prompts", exit_on_error=False, description="tokenize a prompt",
        )
        await self.app.guarded(self.app.on_turn_started(session))

    def _prepare(self, chat_id: int, turn: Turn, chat: "Chat", settings: "ChatSettings") -> None:
        """Worker thread: the prompt's token ids (old ids + what the new message adds) and sampling params."""
        try:
            from llmchat.core.sampling import SamplingParams

            params = SamplingParams(temperature=settings.temperature, top_p=settings.top_p,
                                    max_tokens=settings.max_tokens)
            prompt_ids = chat.prompt_for(self.bridge.tokenizer, turn.user_text)
        except Exception as e:  # a template that rejects the messages, bad settings...
            self.app.post_message(PromptReady(chat_id, (turn, None), None, one_line(e)))
            return
        self.app.post_message(PromptReady(chat_id, (turn, params), prompt_ids, None))

    async def on_prompt_ready(self, msg: PromptReady) -> None:
        session = self.app.sessions.get(msg.chat_id)
        turn, params = msg.turn_token
        if session is None or session.turn is not turn:  # the chat was deleted meanwhile
            return
        if msg.error is not None:
            await self._refuse(session, f"Not sent: {msg.error}.")
            return
        turn.prompt_ids = msg.prompt_ids
        if turn.cancelled or self.closing:
            await self._finish(session, None)
            return
        turn.handle = self.bridge.submit(msg.prompt_ids, params)
        self.by_handle[turn.handle.handle_id] = session

    # -- stop -------------------------------------------------------------------------------
    def cancel(self, session: ChatSession) -> bool:
        turn = session.turn
        if turn is None or turn.cancelled:
            return False
        turn.cancelled = True
        if turn.handle is not None:
            self.bridge.cancel(turn.handle)  # Finished(ABORT) follows, with the text so far
        return True

    # -- stream -----------------------------------------------------------------------------
    async def on_engine_events(self) -> None:
        await self.apply(self.bridge.drain())

    async def apply(self, items: list[StreamItem]) -> None:
        """Take engine events into the turns; text reaches the screen in `flush` (20 Hz at most)."""
        for item in items:
            session = self.by_handle.get(item.handle.handle_id)
            if session is None or session.turn is None or session.turn.handle is not item.handle:
                continue  # a deleted chat's leftovers
            turn, event = session.turn, item.event
            if hasattr(event, "reason"):  # Finished
                del self.by_handle[item.handle.handle_id]
                await self._finish(session, event)
            else:
                turn.text_parts.append(event.text)
                turn.output_ids.extend(event.token_ids)
        now = time.monotonic()
        for session in self.app.sessions.values():
            turn = session.turn
            if turn is not None and turn.handle is not None and now - turn.last_saved >= SAVE_EVERY_S:
                turn.last_saved = now
                self._write(self.store.save_progress, session.chat_id, turn.reply.message_id, turn.text,
                            turn.prompt_ids + turn.output_ids)

    async def flush(self) -> None:
        """Show the current chat's newly streamed text: one Markdown append per frame, not per token, and
        fewer frames when rendering is slow (a frame waits twice as long as the last one took)."""
        session = self.app.current
        now = time.monotonic()
        if session is None or session.turn is None or not self.app.ui_alive or now < self._next_flush:
            return
        view = self.app.chat_screen.transcript.reply_view(session.turn.reply)
        if view is not None:
            await self.app.guarded(view.show_upto(session.turn.text))
            self._next_flush = now + 2 * (time.monotonic() - now)

    # -- finish -----------------------------------------------------------------------------
    async def _finish(self, session: ChatSession, finished: "Finished | None") -> None:
        """Final state of the reply; finished None: it never reached the engine (stopped or closing)."""
        turn = session.turn
        assert turn is not None
        if finished is not None and finished.reason.value == "error" and not finished.output_ids:
            await self._refuse(session, f"Not sent: {finished.error}.")
            return
        reply = turn.reply
        if finished is None:
            reply.content, reply.status = turn.text, "interrupted" if self.closing else "stopped"
            reply.finish_reason = "abort"
            token_ids = (turn.prompt_ids + turn.output_ids) if turn.prompt_ids and turn.output_ids else None
        else:
            reason = finished.reason.value
            reply.content, reply.finish_reason = finished.text, reason
            reply.status = "interrupted" if self.closing and reason == "abort" else STATUS_OF_REASON[reason]
            reply.error, reply.metrics = finished.error, finished.metrics
            token_ids = turn.prompt_ids + list(finished.output_ids)
        if token_ids is None:
            token_ids = list(session.record.token_ids)
        self._write(self.store.finish_turn, session.chat_id, reply, token_ids)
        session.record.token_ids = token_ids
        session.turn = None
        session.banner = self._banner_after(session, finished, len(token_ids))
        if self.app.ui_alive:
            await self.app.guarded(self.app.on_turn_finished(session))

    def _banner_after(self, session: ChatSession, finished: "Finished | None", num_tokens: int) -> Banner | None:
        if finished is None:
            return None
        max_context = self.bridge.info.max_context if self.bridge.info else 0
        if finished.error:
            return Banner("error", f"The reply was cut short: {finished.error}.")
        if finished.reason.value == "length" and max_context and num_tokens >= max_context:
            return Banner("warning", (
                f"This chat is full: it has reached the model's context of {max_context:,} tokens and the reply "
                "stopped there. Nothing was dropped; the next message will be refused. Start a new chat (Ctrl+N)."
            ))
        if finished.reason.value == "length":
            return Banner("info", f"The reply stopped at this chat's max tokens ({session.settings.max_tokens:,}); "
                                  "raise it in the settings (Ctrl+O).")
        return None

    async def _refuse(self, session: ChatSession, why: str) -> None:
        """The engine refused the prompt: the turn is undone and the message goes back to the input."""
        turn = session.turn
        for m in (turn.user, turn.reply):
            self._write(self.store.delete_message, m.message_id)
            session.record.messages.remove(m)
        if session.record.title_auto:
            first = next((m for m in session.record.messages if m.role == "user"), None)
            session.record.title = title_from(first.content) if first else DEFAULT_TITLE
        session.turn = None
        session.banner = Banner("error", f"{why} Your message is back in the input box; nothing was truncated.")
        if self.app.ui_alive:
            await self.app.guarded(self.app.on_turn_refused(session, turn.user_text))

    # -- disk -------------------------------------------------------------------------------
    def _write(self, fn, *args) -> None:
        """A store write; if the disk fails (full, read-only), say so and carry on in memory."""
        try:
            fn(*args)
        except sqlite3.Error as e:
            self._write_failed(e)

    def _write_failed(self, error: Exception) -> None:
        now = time.monotonic()
        if now - self._last_write_error > 10:  # once in a while, not per token
            self._last_write_error = now
            self.app.notify(f"Could not save to {self.store.path}: {error}. The chat goes on in memory.",
                            severity="error", timeout=10)

    # -- close ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop the engine (aborting what is in flight) and store every reply as far as it got."""
        self.closing = True
        import asyncio

        await asyncio.to_thread(self.bridge.shutdown)
        await self.apply(self.bridge.drain())  # the Finished(ABORT) events of the turns in flight
        for session in list(self.app.sessions.values()):
            if session.turn is not None:  # never reached the engine, or no Finished came back in time
                await self._finish(session, None)
