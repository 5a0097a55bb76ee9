"""A system prompt for a template that has no system role: folded into the user turn after it.

Gemma 2 and Mistral v0.1 refuse a system message (their templates call `raise_exception`), and some
templates (Phi-3-mini's first one) drop it without a word. Gemma 3's template shows what such a model
expects: the system text, a blank line, then the first user message, in one user turn. Ollama and
llama.cpp's server fold the same way. The fold is deterministic, so turn N+1's prompt still extends
turn N's and the prefix cache keeps matching.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .chat_template import TemplateRefused

Messages = list[dict[str, Any]]


def fold_system_messages(messages: Sequence[dict[str, Any]]) -> Messages:
    """Each system message's text put before the next user message's, a blank line between; a system
    message with no user message after it becomes a user message of its own."""
    folded: Messages = []
    pending: list[str] = []
    for message in messages:
        if message.get("role") == "system" and isinstance(message.get("content"), str):
            pending.append(message["content"])
            continue
        if message.get("role") == "user" and pending and isinstance(message.get("content"), str):
            message = {**message, "content": "\n\n".join(pending + [message["content"]])}
            pending = []
        folded.append(message)
    if pending:
        folded.append({"role": "user", "content": "\n\n".join(pending)})
    return folded


def _has_system_text(messages: Sequence[dict[str, Any]]) -> bool:
    return any(m.get("role") == "system" and isinstance(m.get("content"), str) and m["content"].strip()
               for m in messages)


def _dropped_system_text(messages: Sequence[dict[str, Any]], rendered: str) -> bool:
    return any(m.get("role") == "system" and isinstance(m.get("content"), str) and m["content"].strip()
               and m["content"].strip() not in rendered for m in messages)


def render_with_system_role(render: Callable[[Messages], str], messages: Messages) -> str:
    """`render(messages)`, or `render(fold_system_messages(messages))` where the template refuses the system
    role or renders without its text. The template's own error stands when folding does not help."""
    if not _has_system_text(messages):
        return render(messages)
    try:
        rendered = render(messages)
    except TemplateRefused as refused:
        try:
            return render(fold_system_messages(messages))
        except TemplateRefused:
            raise refused from None
    return render(fold_system_messages(messages)) if _dropped_system_text(messages, rendered) else rendered
