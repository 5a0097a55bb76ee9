"""A chat keeps the exact token ids it fed the model and got back, so each next prompt extends them.

Turn N+1's prompt = every id of turn N (prompt + reply, end-of-turn token included) + the ids of
the template text that the new user message adds. Nothing earlier is re-tokenized, so the prefix
matches the KV cache bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llmchat.core.tokenizer import Tokenizer


@dataclass(slots=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(slots=True)
class Chat:
    messages: list[Message] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # everything fed to and produced by the model so far

    @classmethod
    def new(cls, system: str | None = None) -> "Chat":
        return cls([Message("system", system)] if system else [])

    def template_messages(self) -> list[dict]:
        return [{"role": m.role, "content": m.content} for m in self.messages]

    def prompt_for(self, tokenizer: Tokenizer, user_text: str) -> list[int]:
        """The ids to submit for a new user message: this chat's ids, then only what the message adds."""
        messages = self.template_messages() + [{"role": "user", "content": user_text}]
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        if not self.token_ids:
            return tokenizer.encode(rendered)
        fed = tokenizer.decode(self.token_ids)
        if rendered.startswith(fed):
            return self.token_ids + tokenizer.encode(rendered[len(fed) :])
        # The template rewrote earlier turns (or a reply was cut by a stop string): fall back to a fresh
        # tokenization; the prefix cache still reuses whatever leading blocks match.
        return tokenizer.encode(rendered)

    def record_turn(self, user_text: str, prompt_ids: list[int], output_ids: list[int], reply_text: str) -> None:
        """After a reply: remember what the model saw and said, exactly."""
        self.messages.append(Message("user", user_text))
        self.messages.append(Message("assistant", reply_text))
        self.token_ids = list(prompt_ids) + list(output_ids)
