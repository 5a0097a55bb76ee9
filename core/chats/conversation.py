"""One conversation: its messages with the exact token ids each contributed, its settings, its rules.

The store maps rows to these records and back and holds no rules; the UI renders them and keeps no copy of their
state. A conversation keeps every token id it fed the model and got back (`token_ids`), and each message the span
`[start, end)` of those ids it added: a user message spans the template text its turn added (role header, the
text, the generation prompt), a reply spans its generated ids. So a later edit, regenerate or fork at any message
knows the prefix that stays valid.

A conversation change persists itself: a conversation loaded from a store (ChatStore.load_chat) holds it, and each
operation below changes memory and makes one store call, so memory and disk cannot drift. A conversation made here
(bench, serve, tests) holds none, and the same operations only change memory. When the store call raises,
start_turn and start_reply undo their change; the others keep it in memory.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Protocol

from ..api.explanation import CacheExplanation
from ..api.metrics import RequestMetrics
from ..api.params import DEFAULT_SAMPLING, SamplingParams
from ..api.protocol import ChatPrompt
from .origin import ChatOrigin

DEFAULT_TITLE = "New chat"
TITLE_MAX_CHARS = 48

# Message status: done (finished normally), streaming (being written; becomes interrupted at the next open if the
# app died), stopped (the user pressed Esc or closed the app), error (cut short by the engine).
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
    temperature: float = DEFAULT_SAMPLING.temperature
    top_p: float = DEFAULT_SAMPLING.top_p
    max_tokens: int = DEFAULT_SAMPLING.max_tokens
    top_k: int = DEFAULT_SAMPLING.top_k  # 0: off
    seed: int | None = DEFAULT_SAMPLING.seed  # None: a fresh random stream per reply
    stop: tuple[str, ...] = DEFAULT_SAMPLING.stop  # the reply ends before the first of these (never shown)

    def sampling_params(self) -> SamplingParams:
        """What a turn of this chat is sampled with."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                              top_k=self.top_k, seed=self.seed, stop=self.stop)

    def check(self) -> None:
        """ValueError (one line, with the remedy) unless a turn can use every value and a row can hold it (no NaN,
        infinity or max tokens past any context: 10**30 would not even fit SQLite's INTEGER)."""
        if not (self.system_prompt is None or isinstance(self.system_prompt, str)):
            raise ValueError(f"the system prompt must be text, got {self.system_prompt!r}")
        self.sampling_params()  # (SamplingParams checks each of its fields)
        if self.seed is not None and self.seed > MAX_SEED or len(self.stop) > MAX_STOP_STRINGS:
            raise ValueError(f"seed must be at most {MAX_SEED} and stop strings at most {MAX_STOP_STRINGS}")


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
    # character ranges [start, end) of a reply streamed in this run whose tokens were drafted and kept (not stored)
    draft_spans: list[tuple[int, int]] = field(default_factory=list)
    # a reply streamed in this run (not stored): it began inside `<think>` (its prompt opened it), and how many
    # of its tokens were reasoning (None: not known, e.g. a reply loaded from the store)
    reasoning_open: bool = False
    num_reasoning_tokens: int | None = None


class ChatWriter(Protocol):
    """The store calls of the operations below, one per operation (core/chats/store.py implements it)."""

    def add_messages(self, conversation: "Conversation", *messages: Message) -> None: ...
    def delete_messages(self, conversation: "Conversation", *messages: Message) -> None: ...
    def truncate(self, conversation: "Conversation", removed: list[Message]) -> None: ...
    def save_ids(self, conversation: "Conversation") -> None: ...
    def save_progress(self, conversation: "Conversation", reply: Message) -> None: ...
    def finish_turn(self, conversation: "Conversation", reply: Message) -> None: ...
    def save_title(self, conversation: "Conversation") -> None: ...
    def update_settings(self, chat_id: int, settings: ChatSettings) -> None: ...
    def add_chat(self, conversation: "Conversation") -> "Conversation": ...
    def save_origin(self, conversation: "Conversation") -> None: ...


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
    store: ChatWriter | None = field(default=None, repr=False, compare=False)  # None: kept in memory only
    origin: ChatOrigin | None = None  # how it continued a full chat (core/chats/origin.py); None: began on its own

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
        if self.store is not None:
            self.store.save_title(self)

    def update_settings(self, settings: ChatSettings) -> None:
        """New settings (they apply from the next turn); ValueError (nothing changes) for values no turn can use."""
        settings.check()
        self.settings = settings  # (kept in memory even if the store call below raises)
        if self.store is not None:
            self.store.update_settings(self.chat_id, settings)

    # -- turns ------------------------------------------------------------------------------
    def start_turn(self, text: str) -> tuple[Message, Message]:
        """Append the user's message and an empty streaming reply; returns both."""
        user, reply = Message("user", text), Message("assistant", "", status="streaming")
        self.messages += [user, reply]
        self.updated_at = time.time()
        self.retitle()
        self._added_or_undone(user, reply)
        return user, reply

    def start_reply(self) -> tuple[Message, Message]:
        """A new streaming reply to the last message (a user message whose reply was dropped); returns both."""
        assert self.messages and self.messages[-1].role == "user", "a reply answers a user message"
        reply = Message("assistant", "", status="streaming")
        self.messages.append(reply)
        self.updated_at = time.time()
        self._added_or_undone(reply)
        return self.messages[-2], reply

    def _added_or_undone(self, *added: Message) -> None:
        """Store the messages just appended; if the store refuses, they go again (and the error is raised)."""
        if self.store is None:
            return
        try:
            self.store.add_messages(self, *added)
        except BaseException:
            self.messages = [m for m in self.messages if all(m is not a for a in added)]
            self.retitle()
            raise

    def undo_turn(self, user: Message, reply: Message) -> None:
        """A turn that never ran (the engine refused its prompt): both messages go, the title follows."""
        for m in (user, reply):
            self.messages.remove(m)
        self.retitle()
        if self.store is not None:
            self.store.delete_messages(self, user, reply)

    # -- branches: each keeps the exact ids before the point it changes ---------------------
    def cut_at(self, message: Message) -> list[Message]:
        """Remove `message` and every message after it; returns them. The chat keeps the exact ids before it
        (all of them when its span is unknown: then the next prompt is tokenized afresh)."""
        return self._cut(message, message)

    def drop_last_reply(self) -> Message:
        """For a regenerate: the last reply goes, and the ids go back to the start of its user message, so the
        next prompt re-renders that message to the very same ids."""
        reply = self.messages[-1]
        assert reply.role == "assistant" and len(self.messages) >= 2, "the chat ends with a reply"
        self._cut(reply, self.messages[-2])
        return reply

    def _cut(self, message: Message, keep_ids_before: Message) -> list[Message]:
        i = self.messages.index(message)
        removed = self.messages[i:]
        del self.messages[i:]
        span = keep_ids_before.token_span
        self.token_ids = self.token_ids[: span[0]] if span is not None else []
        self.updated_at = time.time()
        self.retitle()
        if self.store is not None:
            self.store.truncate(self, removed)
        return removed

    def branch(self, upto: Message | None, title: str | None = None, origin: ChatOrigin | None = None,
               ) -> "Conversation":
        """A copy of this chat up to and including `upto` (None: no messages yet, titled by its first one), with
        the exact ids up to its end: a fork, stored as a new chat when this one is stored (the stored copy is
        returned); `origin`: why it was made (a full chat's choice)."""
        i = self.messages.index(upto) if upto is not None else -1
        messages = [Message(m.role, m.content, m.status, m.finish_reason, m.error, m.metrics, m.created_at, None,
                            m.token_span) for m in self.messages[: i + 1]]
        end = upto.token_span[1] if upto is not None and upto.token_span is not None else 0
        fork = Conversation(0, title or f"{self.title} (fork)", upto is None, settings=replace(self.settings),
                            token_ids=self.token_ids[:end], messages=messages, model_id=self.model_id,
                            origin=origin)
        return self.store.add_chat(fork) if self.store is not None else fork

    def adopt_model(self, model_id: str) -> None:
        """The chat's ids become `model_id`'s: ids of another model are dropped (the next prompt is tokenized
        afresh from the messages), and the chat is marked as of this model from now on."""
        if self.model_id == model_id:
            return
        if self.model_id is not None:
            self.token_ids = []
            for m in self.messages:
                m.token_span = None
        self.model_id = model_id
        if self.store is not None:
            self.store.save_ids(self)

    def begin_reply(self, user: Message, reply: Message, prompt_ids: list[int]) -> None:
        """The engine took the turn's prompt: this chat's ids, then what the user's message added."""
        if prompt_ids[: len(self.token_ids)] == self.token_ids:
            user.token_span = (len(self.token_ids), len(prompt_ids))
        else:  # the prompt was tokenized afresh (the template rewrote earlier turns): old spans are void
            for m in self.messages:
                m.token_span = None
        self.token_ids = list(prompt_ids)
        reply.token_span = (len(prompt_ids), len(prompt_ids))
        if self.store is not None:
            self.store.save_ids(self)

    def extend_reply(self, reply: Message, output_ids: list[int], text: str | None = None) -> None:
        """The reply so far: its generated ids (all of them, not just the new ones) and its text (None: as is)."""
        self._set_output(reply, output_ids, text)
        if self.store is not None:
            self.store.save_progress(self, reply)

    def _set_output(self, reply: Message, output_ids: list[int] | None, text: str | None) -> None:
        if output_ids is not None:
            assert reply.token_span is not None, "begin_reply first"
            start = reply.token_span[0]
            self.token_ids = self.token_ids[:start] + list(output_ids)
            reply.token_span = (start, start + len(output_ids))
        if text is not None:
            reply.content = text

    def finish_reply(self, reply: Message, content: str, status: str, finish_reason: str | None,
                     error: str | None = None, metrics: RequestMetrics | None = None,
                     output_ids: list[int] | None = None) -> None:
        """The reply's final state (and its generated ids, when given: every one of them)."""
        assert status in STATUSES
        self._set_output(reply, output_ids, content)
        reply.status, reply.finish_reason, reply.error, reply.metrics = status, finish_reason, error, metrics
        if self.store is not None:
            self.store.finish_turn(self, reply)

    def record_first_turn(self, reply: Message) -> None:
        """A chat that continued a full one: its first reply's metrics are the measured cost of that choice (once)."""
        o = self.origin
        first = self.messages[o.num_start_messages + 1:o.num_start_messages + 2] if o is not None else []
        if first and first[0] is reply and o.first_turn is None and reply.metrics is not None:
            self.origin = replace(o, first_turn=reply.metrics)
            if self.store is not None:
                self.store.save_origin(self)

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

    def prompt(self) -> ChatPrompt:
        """What a backend answers now: the template's messages and the chat's ids (read at once)."""
        return ChatPrompt(tuple(self.template_messages()), tuple(self.token_ids))

    def finished_metrics(self) -> list[RequestMetrics]:
        """The RequestMetrics of the finished replies, oldest first (for the history sparklines)."""
        return [m.metrics for m in self.messages if m.role == "assistant" and m.metrics is not None]
