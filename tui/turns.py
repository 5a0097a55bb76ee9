"""One chat turn in the UI: send -> submit -> stream -> finish, saved as it goes.

Runs on the UI thread. The user's message and an empty "streaming" reply are stored at once and the
conversation goes to the backend, which renders the template and tokenizes on its own thread. The
backend's events (Started, TextDelta, Finished) update the turn; the reply's text and the chat's token
ids are saved every few seconds while it streams and for good, before the app is told, when Finished
arrives, so a crash or a close keeps the reply up to where it got. This class never calls into the
app: it posts TurnStarted / TurnFinished / TurnRefused / SaveFailed messages, which the app handles.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.chats.conversation import STATUS_OF_REASON
from .bridge import EngineBridge, StreamItem
from .messages import SaveFailed, TurnFinished, TurnRefused, TurnStarted
from .session import Banner, ChatSession, Turn

if TYPE_CHECKING:
    from textual.message import Message

    from ..core.api.events import Finished
    from ..core.chats.store import ChatStore

SAVE_EVERY_S = 2.0


class TurnManager:
    def __init__(self, store: "ChatStore", bridge: EngineBridge, post: Callable[["Message"], object]) -> None:
        self.store = store
        self.bridge = bridge
        self.post = post
        self.by_handle: dict[int, ChatSession] = {}
        self.closing = False

    # -- send -------------------------------------------------------------------------------
    def why_not_send(self, session: ChatSession) -> str | None:
        """Why a turn cannot start now (the message stays in the box), or None when it can."""
        if not self.bridge.ready:
            return "The model is still loading; your message stays in the box."
        if session.busy:
            return "This chat is still replying: Esc stops it, Ctrl+N starts another chat."
        return None

    def send(self, session: ChatSession, text: str) -> bool:
        """Start a turn (why_not_send must be None): store the message, submit the conversation. False: the
        store refused the write (SaveFailed is posted) and nothing was started."""
        assert self.bridge.ready and not session.busy
        try:
            user, reply = session.conversation.start_turn(text)  # (stored; undone if the store refuses)
        except sqlite3.Error as e:
            self.post(SaveFailed(self.store.path, str(e)))
            return False
        return self._submit(session, user, reply)

    def resend(self, session: ChatSession) -> bool:
        """Answer the chat's last message again (a regenerate: its last reply was dropped). False: not stored."""
        assert self.bridge.ready and not session.busy
        try:
            user, reply = session.conversation.start_reply()
        except sqlite3.Error as e:
            self.post(SaveFailed(self.store.path, str(e)))
            return False
        return self._submit(session, user, reply)

    def _submit(self, session: ChatSession, user, reply) -> bool:
        chat = session.conversation
        if self.bridge.info is not None and self.bridge.info.model_id is not None:
            self._write(chat.adopt_model, self.bridge.info.model_id)  # ids of another model are dropped
        session.turn = Turn(user, reply)
        session.banner = None
        session.turn.handle = self.bridge.submit(session.chat_id, chat, session.settings.sampling_params())
        self.by_handle[session.turn.handle.handle_id] = session
        self.post(TurnStarted(session))
        return True

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
    def apply(self, items: list[StreamItem]) -> None:
        """Take backend events into the turns; the app shows the text (20 Hz at most)."""
        from ..core.api.events import Finished, Started  # (loaded with the backend, not with the UI)

        for item in items:
            session = self.by_handle.get(item.handle.handle_id)
            if session is None or session.turn is None or session.turn.handle is not item.handle:
                continue  # a deleted chat's leftovers
            turn, event = session.turn, item.event
            if isinstance(event, Finished):
                del self.by_handle[item.handle.handle_id]
                self._finish(session, event)
            elif isinstance(event, Started):
                turn.prompt_ids = list(event.prompt_ids)
                if event.reasoning_open:
                    turn.begin_inside_reasoning()
                self._write(session.conversation.begin_reply, turn.user, turn.reply, turn.prompt_ids)
            else:
                turn.add_text(event.text, event.drafted, len(event.token_ids) or 1)
                turn.output_ids.extend(event.token_ids)
        now = time.monotonic()
        for session in self.by_handle.values():
            turn = session.turn
            if turn is not None and turn.prompt_ids is not None and now - turn.last_saved >= SAVE_EVERY_S:
                turn.last_saved = now
                self._write(session.conversation.extend_reply, turn.reply, turn.output_ids, turn.text)

    # -- finish -----------------------------------------------------------------------------
    def _finish(self, session: ChatSession, finished: "Finished | None") -> None:
        """Final state of the reply; finished None: no Finished came back (the app is closing)."""
        turn = session.turn
        assert turn is not None
        if finished is not None and finished.reason.value == "error" and not finished.output_ids and not finished.text:
            self._refuse(session, f"Not sent: {finished.error}.")
            return
        chat = session.conversation
        output_ids = None if turn.prompt_ids is None else list(finished.output_ids) if finished else turn.output_ids
        if finished is None:  # (each finish_reply is committed before anyone is told)
            self._write(chat.finish_reply, turn.reply, turn.text, "interrupted" if self.closing else "stopped",
                        "abort", None, None, output_ids)
        else:
            reason = finished.reason.value
            status = "interrupted" if self.closing and reason == "abort" else STATUS_OF_REASON[reason]
            turn.reply.explanation = finished.explanation
            self._write(chat.finish_reply, turn.reply, finished.text, status, reason, finished.error,
                        finished.metrics, output_ids)
        session.turn = None
        session.banner = self._banner_after(session, finished)
        self.post(TurnFinished(session))

    def _banner_after(self, session: ChatSession, finished: "Finished | None") -> Banner | None:
        if finished is None:
            return None
        max_context = self.bridge.info.context_length if self.bridge.info else 0
        if finished.error:
            return Banner("error", f"The reply was cut short: {finished.error}.")
        if finished.reason.value == "length" and max_context and len(session.conversation.token_ids) >= max_context:
            return Banner("warning", (
                f"This chat is full: it has reached the model's context of {max_context:,} tokens and the reply "
                "stopped there. Nothing was dropped; the next message will be refused. Start a new chat (Ctrl+N)."
            ))
        if finished.reason.value == "length":
            return Banner("info", f"The reply stopped at this chat's max tokens ({session.settings.max_tokens:,}); "
                                  "raise it in the settings (Ctrl+O).")
        return None

    def _refuse(self, session: ChatSession, why: str) -> None:
        """The backend refused the prompt: the turn is undone and the message goes back to the input."""
        turn = session.turn
        self._write(session.conversation.undo_turn, turn.user, turn.reply)
        session.turn = None
        session.banner = Banner("error", f"{why} Your message is back in the input box; nothing was truncated.")
        self.post(TurnRefused(session, turn.user.content))

    # -- disk -------------------------------------------------------------------------------
    def _write(self, fn, *args) -> None:
        """A store write; if the disk fails (full, read-only), say so and carry on in memory."""
        try:
            fn(*args)
        except sqlite3.Error as e:
            self.post(SaveFailed(self.store.path, str(e)))

    # -- close ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop the backend (aborting what is in flight) and store every reply as far as it got."""
        import asyncio

        self.closing = True
        await asyncio.to_thread(self.bridge.shutdown)
        self.apply(self.bridge.drain())  # the Finished(ABORT) events of the turns in flight
        for session in list(self.by_handle.values()):
            if session.turn is not None:  # no Finished came back in time
                self._finish(session, None)
