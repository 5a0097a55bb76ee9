"""A message that does not fit the chat's context opens a priced choice instead of only a refusal (issue 27 item
5; tui/text/full_chat.py prices the options): continue from a summary the model writes (tui/actions/
chat_summary.py runs it), drop the oldest turns into a new chat, or fork from an earlier message. The full chat is
never changed; the new chat's title and its origin record (core/chats/origin.py: the choice, its price, what it
measured) say how it began, and the message waits in its input box."""
from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING

from ...core.chats.conversation import Conversation, Message
from ...core.chats.origin import ChatOrigin
from ..session import ChatSession
from ..text.full_chat import Choice, full_chat_choices, summary_choice, summary_messages
from .chat_summary import start_summary

if TYPE_CHECKING:
    from ..app import LlmChatApp

CONTEXT_REFUSAL = re.compile(r"the prompt has (\d+) tokens but the model's context is (\d+)")


async def offer_full_chat_choice(app: "LlmChatApp", session: ChatSession, text: str) -> bool:
    """Open the choice when the session's refusal says its prompt outgrew the context; False when it did not (or
    there is no way to fit the message). The summary is priced first, from a cost preview of its request."""
    from ..screens.full_chat_choice import FullChatChoiceScreen

    match = CONTEXT_REFUSAL.search(session.banner.text if session.banner else "")
    if match is None:
        return False
    num_prompt, context = int(match.group(1)), int(match.group(2))
    chat = session.conversation
    stats = app.bridge.stats()
    rate = stats.prefill_tokens_per_s if stats is not None else 0.0
    message_tokens = num_prompt - len(chat.token_ids)
    choices = full_chat_choices(chat, message_tokens, context, rate or 0.0)
    messages, ids = summary_messages(chat), list(chat.token_ids)
    preview = await app.bridge.ask(lambda backend: backend.preview_cost(messages, ids))  # (None: not inspectable)
    summary = preview and summary_choice(chat, preview.num_prompt_tokens, preview.num_reused_tokens, message_tokens,
                                         context, rate or 0.0, stats.recent_tpot if stats else ())
    choices = [summary, *choices] if summary else choices
    if not choices or not app.ui_alive or app.current is not session:
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
    if choice.kind == "summary":
        start_summary(app, session, choice, text)  # (the new chat comes when the summary is written)
        return
    if choice.kind == "fork":
        start = choice.keep_from + 1
        new = await app.add_fork(session, chat.messages[choice.keep_from],
                                 f"{chat.title} (fork from #{start} to fit)", origin_of(chat, choice, start))
    else:
        kept = [Message(m.role, m.content, m.status, m.finish_reason, m.error, m.metrics, m.created_at)
                for m in chat.messages[choice.keep_from:]]  # no token spans: tokenized afresh
        trimmed = Conversation(0, f"{chat.title} (oldest {choice.keep_from // 2} turns dropped)", False,
                               settings=replace(chat.settings), messages=kept, model_id=chat.model_id,
                               origin=origin_of(chat, choice, len(kept)))
        new = await store_new_chat(app, chat, trimmed, "the trimmed chat")
    if new is not None:  # (None: the disk refused it, told once; the message stays where it was)
        await open_new_chat(app, new, choice, text)


def origin_of(chat: Conversation, choice: Choice, num_start_messages: int) -> ChatOrigin:
    return ChatOrigin(chat.chat_id, choice.kind, num_start_messages, choice.num_prefill_tokens, choice.seconds)


async def store_new_chat(app: "LlmChatApp", full: Conversation, conversation: Conversation,
                         what: str) -> ChatSession | None:
    """The new chat of a choice, stored (or kept in memory when the full chat is); None (one notice, nothing
    changed) when the disk refused it."""
    try:
        stored = full.store.add_chat(conversation) if full.store is not None else None
    except sqlite3.Error as e:
        app.tell_not_saved(f"Could not store {what} in {app.store.path}: {e}; nothing changed.")
        return None
    if stored is None:  # a chat kept in memory only continues in memory too
        conversation.chat_id = app.memory_chat_id()
    new = ChatSession(stored or conversation)
    app.sessions[new.chat_id] = new
    await app.refresh_chat_list()
    return new


async def open_new_chat(app: "LlmChatApp", new: ChatSession, choice: Choice, text: str) -> None:
    await app.open_chat(new.chat_id)
    app.chat_screen.prompt.set_message(text)
    app.notify(f"#{new.chat_id}: {choice.text.split(':')[0]}; Enter sends the message there", timeout=6)


def record_first_turn(app: "LlmChatApp", session: ChatSession) -> None:
    """A finished turn in a chat that continued a full one: its first reply's metrics are the choice's measured
    cost (stored once, shown in the chat's origin line)."""
    chat = session.conversation
    if chat.origin is None or chat.origin.first_turn is not None or not chat.messages:
        return
    app.saved(chat.record_first_turn, chat.messages[-1], what="the measured cost of how this chat began")
    if chat.origin.first_turn is not None and session.chat_id == app.current_id:
        app.chat_screen.transcript.show_origin(session)
