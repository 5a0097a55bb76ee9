"""One conversation: its messages with the exact token ids each contributed, its settings, its rules.

The store maps rows to these records and back and holds no rules; the UI renders them and keeps no
copy of their state. A conversation keeps every token id it fed the model and got back
(`token_ids`), and each message the span `[start, end)` of those ids it added: a user message spans
the template text its turn added (role header, the text, the generation prompt), a reply spans its
generated ids. So a later edit, regenerate or fork at any message knows the prefix that stays valid.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ..api.explanation import CacheExplanation
from ..api.metrics import RequestMetrics

DEFAULT_TITLE = "New chat"
TITLE_MAX_CHARS = 48

# Message status: done (finished normally), streaming (being written; becomes interrupted at the next
# open if the app died), stopped (the user pressed Esc or closed the app), error (cut short by the engine).
STATUSES = ("done", "streaming", "stopped", "interrupted", "error")
STATUS_OF_REASON = {"stop": "done", "length": "done", "abort": "stopped", "error": "error"}


def title_from(text: str) -> str:
    """A chat title from its first message: the first non-empty line, whitespace collapsed, shortened."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if not line:
        return DEFAULT_TITLE
    return line if len(line) <= TITLE_MAX_CHARS else line[: TITLE_MAX_CHARS - 1].rstrip() + "…"


MAX_STOP_STRINGS = 8  # a chat's stop strings: this many at most, each non-empty
MAX_SEED = (1 << 63) - 1  # what a SQLite INTEGER holds


@dataclass(slots=True)
class ChatSettings:
    system_prompt: str | None = None  # None: the model's default system prompt
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512
    top_k: int = 0  # 0: off
    seed: int | None = None  # None: a fresh random stream per reply
    stop: tuple[str, ...] = ()  # the reply ends before the first of these (never shown)


@dataclass(slots=True)
class Message:
    role: str  # "user" | "assistant"
    content: str
    status: str = "done"
    finish_reason: str | None = None
    error: str | None = None
    metrics: RequestMetrics | None = None
    created_at: float = field(default_factory=time.time)
    message_id: int | None = None
    token_span: tuple[int, int] | None = None  # [start, end) in Conversation.token_ids; None: not known
    explanation: CacheExplanation | None = None  # a reply's prefix reuse, as the engine explained it (not stored)
    # character ranges [start, end) of a reply streamed in this run whose tokens were drafted and kept
    # (speculative decoding); not stored
    draft_spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass(slots=True)
class Conversation:
    chat_id: int
    title: str = DEFAULT_TITLE
    title_auto: bool = True  # follows the first user message until the user renames the chat
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    settings: ChatSettings = field(default_factory=ChatSettings)
    token_ids: list[int] = field(default_factory=list)  # everything fed to and produced by the model so far
    messages: list[Message] = field(default_factory=list)
    model_id: str | None = None  # the model its token_ids are of (BackendInfo.model_id); None: not known yet

    # -- the title rule ---------------------------------------------------------------------
    def retitle(self) -> None:
        """An untitled chat is titled by its first user message (or the default title when it has none)."""
        if self.title_auto:
            first = next((m for m in self.messages if m.role == "user"), None)
            self.title = title_from(first.content) if first else DEFAULT_TITLE

    def rename(self, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise ValueError("a chat title cannot be empty")
        self.title, self.title_auto = title, False

    # -- turns ------------------------------------------------------------------------------
    def start_turn(self, text: str) -> tuple[Message, Message]:
        """Append the user's message and an empty streaming reply; returns both."""
        user, reply = Message("user", text), Message("assistant", "", status="streaming")
        self.messages += [user, reply]
        self.updated_at = time.time()
        self.retitle()
        return user, reply

    def undo_turn(self, user: Message, reply: Message) -> None:
        """A turn that never ran (the engine refused its prompt): both messages go, the title follows."""
        for m in (user, reply):
            self.messages.remove(m)
        self.retitle()

    def start_reply(self) -> tuple[Message, Message]:
        """A new streaming reply to the last message (a user message whose reply was dropped); returns both."""
        assert self.messages and self.messages[-1].role == "user", "a reply answers a user message"
        reply = Message("assistant", "", status="streaming")
        self.messages.append(reply)
        self.updated_at = time.time()
        return self.messages[-2], reply

    # -- branches: each keeps the exact ids before the point it changes ---------------------
    def cut_at(self, message: Message) -> list[Message]:
        """Remove `message` and every message after it; returns them. The chat keeps the exact ids before it
        (all of them when its span is unknown: then the next prompt is tokenized afresh)."""
        i = self.messages.index(message)
        removed = self.messages[i:]
        del self.messages[i:]
        self.token_ids = self.token_ids[: message.token_span[0]] if message.token_span is not None else []
        self.updated_at = time.time()
        self.retitle()
        return removed

    def drop_last_reply(self) -> Message:
        """For a regenerate: the last reply goes, and the ids go back to the start of its user message, so the
        next prompt re-renders that message to the very same ids."""
        reply = self.messages[-1]
        assert reply.role == "assistant" and len(self.messages) >= 2, "the chat ends with a reply"
        user = self.messages[-2]
        self.cut_at(reply)
        self.token_ids = self.token_ids[: user.token_span[0]] if user.token_span is not None else []
        return reply

    def branch(self, upto: Message, chat_id: int = 0) -> "Conversation":
        """A copy of this chat up to and including `upto`, with the exact ids up to its end (a fork)."""
        i = self.messages.index(upto)
        messages = [Message(m.role, m.content, m.status, m.finish_reason, m.error, m.metrics, m.created_at, None,
                            m.token_span) for m in self.messages[: i + 1]]
        end = upto.token_span[1] if upto.token_span is not None else 0
        return Conversation(chat_id, f"{self.title} (fork)", False, settings=replace(self.settings),
                            token_ids=self.token_ids[:end], messages=messages, model_id=self.model_id)

    def forget_ids(self) -> None:
        """Drop the ids (they are of another model): the next prompt is tokenized afresh from the messages."""
        self.token_ids = []
        for m in self.messages:
            m.token_span = None

    def begin_reply(self, user: Message, reply: Message, prompt_ids: list[int]) -> None:
        """The engine took the turn's prompt: this chat's ids, then what the user's message added."""
        if prompt_ids[: len(self.token_ids)] == self.token_ids:
            user.token_span = (len(self.token_ids), len(prompt_ids))
        else:  # the prompt was tokenized afresh (the template rewrote earlier turns): old spans are void
            for m in self.messages:
                m.token_span = None
        self.token_ids = list(prompt_ids)
        reply.token_span = (len(prompt_ids), len(prompt_ids))

    def extend_reply(self, reply: Message, output_ids: list[int]) -> None:
        """The reply's generated ids so far (all of them, not just the new ones)."""
        assert reply.token_span is not None, "begin_reply first"
        start = reply.token_span[0]
        self.token_ids = self.token_ids[:start] + list(output_ids)
        reply.token_span = (start, start + len(output_ids))

    def finish_reply(self, reply: Message, content: str, status: str, finish_reason: str | None,
                     error: str | None = None, metrics: RequestMetrics | None = None) -> None:
        assert status in STATUSES
        reply.content, reply.status, reply.finish_reason = content, status, finish_reason
        reply.error, reply.metrics = error, metrics

    # -- what the model is sent -------------------------------------------------------------
    def template_messages(self, upto: Message | None = None) -> list[dict]:
        """The messages for the chat template: the system prompt, then every message before `upto`
        (all of them when None), leaving out replies still streaming."""
        out = [{"role": "system", "content": self.settings.system_prompt}] if self.settings.system_prompt else []
        for m in self.messages:
            if m is upto:
                break
            if m.status != "streaming":
                out.append({"role": m.role, "content": m.content})
        return out

    def finished_metrics(self) -> list[RequestMetrics]:
        """The RequestMetrics of the finished replies, oldest first (for the history sparklines)."""
        return [m.metrics for m in self.messages if m.role == "assistant" and m.metrics is not None]
