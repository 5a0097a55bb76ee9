"""What the UI keeps per chat: its stored record and the reply in flight (no widgets, no engine calls)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmchat.core.store import ChatRecord, ChatSettings, StoredMessage

if TYPE_CHECKING:
    from llmchat.core.chat import Chat
    from llmchat.core.service import RequestHandle


@dataclass(slots=True)
class Turn:
    """One reply in flight: from Enter to the engine's Finished event."""

    user: StoredMessage
    reply: StoredMessage  # status "streaming" until it finishes
    user_text: str  # what the model is sent (pastes expanded)
    prompt_ids: list[int] | None = None  # set when the worker has tokenized the prompt
    handle: RequestHandle | None = None
    output_ids: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    cancelled: bool = False  # Esc before the prompt reached the engine
    last_saved: float = field(default_factory=time.monotonic)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def queued(self) -> bool:
        return self.handle is None or not self.output_ids


@dataclass(slots=True)
class Banner:
    kind: str  # "error" | "warning" | "info"
    text: str


@dataclass(slots=True)
class ChatSession:
    record: ChatRecord
    turn: Turn | None = None
    banner: Banner | None = None

    @property
    def chat_id(self) -> int:
        return self.record.chat_id

    @property
    def settings(self) -> ChatSettings:
        return self.record.settings

    @property
    def busy(self) -> bool:
        return self.turn is not None

    def core_chat(self) -> "Chat":
        """The engine-side Chat for the next prompt: the system prompt, the finished messages, their exact ids."""
        from llmchat.core.chat import Chat, Message

        chat = Chat.new(self.settings.system_prompt)
        in_flight = {id(self.turn.user), id(self.turn.reply)} if self.turn else set()
        for m in self.record.messages:
            if id(m) not in in_flight:
                chat.messages.append(Message(m.role, m.content))
        chat.token_ids = list(self.record.token_ids)
        return chat

    def finished_metrics(self) -> list:
        """The RequestMetrics of this chat's finished replies, oldest first (for the history sparklines)."""
        return [m.metrics for m in self.record.messages if m.role == "assistant" and m.metrics is not None]
