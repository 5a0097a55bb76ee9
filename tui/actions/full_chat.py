"""A message that does not fit the chat's context opens a priced choice instead of only a refusal (issue 27 item
5; tui/text/full_chat.py prices the options): drop the oldest turns into a new chat, or fork from an earlier
message. The full chat is never changed; the new chat's title records the choice and the message waits in its
input box."""
from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING

from ...core.chats.conversation import Conversation, Message
from ..session import ChatSession
from ..text.full_chat import Choice, full_chat_choices

if TYPE_CHECKING:
    from ..app import LlmChatApp

CONTEXT_REFUSAL = re.compile(r"the prompt has (\d+) tokens but the model's context is (\d+)")


def offer_full_chat_choice(app: "LlmChatApp", session: ChatSession, text: str) -> bool:
    """Open the choice when the session's refusal says its prompt outgrew the context; False when it did not (or
    there is no way to fit the message)."""
    from ..screens.full_chat_choice import FullChatChoiceScreen

    match = CONTEXT_REFUSAL.search(session.banner.text if session.banner else "")
    if match is None:
        return False
    num_prompt, context = int(match.group(1)), int(match.group(2))
    chat = session.conversation
    rate = app.bridge.stats().prefill_tokens_per_s if app.bridge.ready else 0.0
    choices = full_chat_choices(chat, num_prompt - len(chat.token_ids), context, rate or 0.0)
    if not choices:
        return False
    question = (f"This message needs {num_prompt:,} tokens with the chat before it; the model's context holds "
                f"{context:,}. The chat stays as it is; choose where the message goes:")

    async def chosen(choice: Choice | None) -> None:
        if choice is not None:
            await take_choice(app, session, choice, text)

    app.push_screen(FullChatChoiceScreen(question, choices), chosen)
    return True


async def take_choice(app: "LlmChatApp", session: ChatSession, choice: Choice, text: str) -> None:
    chat = session.conversation
    if choice.kind == "fork":
        new = await app.add_fork(session, chat.messages[choice.keep_from],
                                 f"{chat.title} (fork from #{choice.keep_from + 1} to fit)")
        if new is None:  # the disk refused it (told once); the message stays where it was
            return
    else:
        kept = [Message(m.role, m.content, m.status, m.finish_reason, m.error, m.metrics, m.created_at)
                for m in chat.messages[choice.keep_from:]]  # no token spans: tokenized afresh
        trimmed = Conversation(0, f"{chat.title} (oldest {choice.keep_from // 2} turns dropped)", False,
                               settings=replace(chat.settings), messages=kept, model_id=chat.model_id)
        try:
            stored = chat.store.add_chat(trimmed) if chat.store is not None else None
        except sqlite3.Error as e:
            app.tell_not_saved(f"Could not store the trimmed chat in {app.store.path}: {e}; nothing changed.")
            return
        if stored is None:  # a chat kept in memory only is trimmed in memory too
            trimmed.chat_id = app.memory_chat_id()
        new = ChatSession(stored or trimmed)
        app.sessions[new.chat_id] = new
        await app.refresh_chat_list()
    await app.open_chat(new.chat_id)
    app.chat_screen.prompt.set_message(text)
    app.notify(f"#{new.chat_id}: {choice.text.split(':')[0]}; Enter sends the message there", timeout=6)
