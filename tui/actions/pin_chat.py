"""Pin the current chat (F7, or the palette; tui/actions/registry.py): its KV blocks stay out of LRU
eviction within the pin budget (EngineConfig.pin_fraction of the KV cache), through the InspectableBackend; pressed
again, they return to the LRU. app.pinned_chats holds the chats pinned now; a notification says how many of the
chat's blocks the budget let stay pinned. The block map marks pinned blocks."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import LlmChatApp


def pin_text(chat_id: int, pinned: bool, num_pinned: int, num_blocks: int) -> str:
    if not pinned:
        return f"#{chat_id} unpinned: its {num_blocks:,} blocks are back in the LRU"
    if num_pinned < num_blocks:
        return (f"#{chat_id} pinned: {num_pinned:,} of its {num_blocks:,} blocks (the pin budget is full; unpin a "
                f"chat or raise pin_fraction)")
    return f"#{chat_id} pinned: its {num_blocks:,} blocks stay out of LRU eviction"


def toggle_pin(app: "LlmChatApp") -> None:
    session = app.current
    if session is None:
        return
    if app.bridge.inspect is None:
        app.notify("Pinning needs the in-process engine", severity="warning")
        return
    chat_id = session.chat_id
    pinned = chat_id not in app.pinned_chats
    ids = list(session.conversation.token_ids)

    async def pin_and_say() -> None:
        if ids:  # a chat from before a restart: let the engine know its chain first
            app.bridge.remember(chat_id, ids)
        answer = await app.bridge.ask(lambda backend: backend.pin(chat_id, pinned))
        if answer is None:  # the engine shut down meanwhile
            return
        (app.pinned_chats.add if pinned else app.pinned_chats.discard)(chat_id)
        app.notify(pin_text(chat_id, pinned, *answer), timeout=6, markup=False)

    app.run_worker(pin_and_say(), group="pin-chat", exit_on_error=False, description="pin the chat")
