"""Runs the exactness check (core/cache_check.py) on the current chat's last turn in a thread worker, so
the UI and the other chats go on; the result is a notification and stays in app.cache_checks."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.text.sanitize import safe_text

if TYPE_CHECKING:
    from ...core.inspect.cache_check import CacheCheck
    from ..app import LlmChatApp


def check_text(check: "CacheCheck") -> str:
    if check.error:
        return f"Verify cache: could not run: {check.error}"
    head = f"Verify cache ({check.num_cached_tokens:,} of {check.num_prompt_tokens:,} prompt tokens from the cache)"
    if check.identical:
        return f"{head}: identical: {check.num_identical:,} of {check.num_tokens:,} tokens"
    return (f"{head}: DIFFERENT at token {check.divergence:,} of {check.num_tokens:,}: "
            f"{safe_text(repr(check.cached_token))} with the cache, {safe_text(repr(check.uncached_token))} without")


def start_cache_check(app: "LlmChatApp") -> None:
    session = app.current
    service = app.bridge.service
    reply = session.conversation.messages[-1] if session and session.conversation.messages else None
    if reply is None or reply.role != "assistant" or reply.token_span is None or session.busy:
        app.notify("Verify cache needs a finished reply in this chat", severity="warning")
        return
    if not hasattr(service, "submit_ids"):
        app.notify("Verify cache needs the in-process engine", severity="warning")
        return
    start, end = reply.token_span
    prompt_ids = session.conversation.token_ids[:start]
    chat_id = session.chat_id

    def work() -> None:
        from ...core.inspect.cache_check import check_cache

        tokenizer = service.engine.tokenizer
        check = check_cache(service.submit_ids, prompt_ids, end - start, lambda i: tokenizer.decode([i]))
        app.call_from_thread(finished, check)

    def finished(check: "CacheCheck") -> None:
        from ..session import Banner

        app.cache_checks[chat_id] = check
        checked = app.sessions.get(chat_id)
        if checked is None:  # deleted meanwhile
            return
        checked.banner = Banner("info" if check.identical else "error", check_text(check))
        if app.current_id == chat_id:
            app.chat_screen.show_banner(checked.banner)
        else:
            app.notify(f"#{chat_id} {check_text(check)}", severity="information" if check.identical else "error",
                       timeout=12, markup=False)

    app.notify(f"Verifying the cache on chat #{chat_id}'s last turn ({end - start:,} tokens, twice)…", timeout=3)
    app.run_worker(work, thread=True, group="verify-cache", exit_on_error=False, description="verify the cache")
