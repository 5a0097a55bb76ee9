"""What the UI keeps per chat: the conversation (core/chats/conversation.py) and the reply in flight."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.chats.conversation import ChatSettings, Conversation, Message
from ..core.text.reasoning import REASONING, ReasoningSplitter

if TYPE_CHECKING:
    from ..core.api.protocol import Handle


@dataclass(slots=True)
class Turn:
    """One reply in flight: from Enter to the backend's Finished event."""

    user: Message
    reply: Message  # status "streaming" until it finishes
    handle: Handle | None = None
    prompt_ids: list[int] | None = None  # set by the Started event (what the model is fed)
    output_ids: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    cancelled: bool = False
    last_saved: float = field(default_factory=time.monotonic)
    num_chars: int = 0  # len(self.text)
    # the text split as it streams (core/text/reasoning.py): the reasoning block and the answer, tags removed
    splitter: ReasoningSplitter = field(default_factory=ReasoningSplitter)
    reasoning_parts: list[str] = field(default_factory=list)
    content_parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    @property
    def content(self) -> str:
        return "".join(self.content_parts)

    def begin_inside_reasoning(self) -> None:
        """The prompt opened `<think>` (Started.reasoning_open): the reply's first text is reasoning."""
        assert not self.text_parts, "before any text"
        self.splitter = ReasoningSplitter(inside=True)
        self.reply.reasoning_open = True

    def add_text(self, text: str, drafted: bool, num_tokens: int = 1) -> None:
        """Streamed text; a drafted token's text extends the reply's draft spans (merged when adjacent). The
        tokens of a delta that is (or ends) reasoning count as reasoning tokens."""
        was_inside = self.splitter.inside
        pieces = self.splitter.feed(text)
        for kind, piece in pieces:
            (self.reasoning_parts if kind == REASONING else self.content_parts).append(piece)
        if was_inside or self.splitter.inside or any(kind == REASONING for kind, _ in pieces):
            self.reply.num_reasoning_tokens = (self.reply.num_reasoning_tokens or 0) + num_tokens
        self.text_parts.append(text)
        start, self.num_chars = self.num_chars, self.num_chars + len(text)
        if drafted and text:
            spans = self.reply.draft_spans
            if spans and spans[-1][1] == start:
                spans[-1] = (spans[-1][0], self.num_chars)
            else:
                spans.append((start, self.num_chars))

    @property
    def num_output_tokens(self) -> int:
        """Tokens so far; a remote backend sends no ids, so there each streamed delta counts as one."""
        return len(self.output_ids) or sum(1 for part in self.text_parts if part)

    @property
    def queued(self) -> bool:
        return not self.output_ids and not any(self.text_parts)


@dataclass(slots=True)
class Banner:
    kind: str  # "error" | "warning" | "info"
    text: str


@dataclass(slots=True)
class ChatSession:
    conversation: Conversation
    turn: Turn | None = None
    banner: Banner | None = None

    @property
    def chat_id(self) -> int:
        return self.conversation.chat_id

    @property
    def settings(self) -> ChatSettings:
        return self.conversation.settings

    @property
    def busy(self) -> bool:
        return self.turn is not None
