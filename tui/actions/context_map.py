"""F10 (palette: Context map): the current chat's context, message by message, with where its blocks are now
(tui/text/context_map_text.py), in an InfoScreen."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import LlmChatApp


def show_context_map(app: "LlmChatApp") -> None:
    from ..screens.info import InfoScreen
    from ..text.context_map_text import context_map_text

    session = app.current
    if session is None:
        return
    if app.bridge.inspect is None:
        app.notify("The context map needs the in-process engine (it is not ready yet)", severity="warning")
        return
    chat, ids = session.conversation, list(session.conversation.token_ids)
    info = app.bridge.info

    async def show() -> None:
        answer = await app.bridge.ask(lambda backend: backend.block_tiers(ids))
        if answer is None or not app.ui_alive:
            return
        block_size, tiers = answer
        text = context_map_text(chat, tiers, info.context_length if info else None, block_size)
        app.push_screen(InfoScreen(f"Context map of #{session.chat_id}", text))

    app.run_worker(show, group="context-map", exclusive=True, exit_on_error=False, description="the context map")
