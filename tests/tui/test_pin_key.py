"""Pilot test of the pin key (F7, tui/actions/pin_chat.py): pinning the current chat pins its blocks in the engine
(the block map marks them), the notification says so, and F7 again returns them to the LRU."""
from __future__ import annotations

from tui_helpers import SIZE, one_turn, press, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.tui.actions.registry import ACTIONS
from llmchat.tui.screens.block_map import cell_content

SETTINGS = ChatSettings("You keep answers short. " * 8, 0.0, 1.0, 4)


def pinned_cells(app) -> list:
    return [c for c in app.bridge.service.block_map().result(60).cells if c.pinned]


async def test_f7_pins_the_chat_and_again_unpins_it(make_app):
    assert any(a.action == "toggle_pin" and a.keys == "f7" for a in ACTIONS)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "What is a KV cache?", SETTINGS)
        chat = app.current
        await press(pilot, "f7")
        await wait_for(pilot, lambda: chat.chat_id in app.pinned_chats, timeout=60)
        cells = pinned_cells(app)
        num_chain = len(chat.conversation.token_ids) // app.bridge.service.engine.block_manager.block_size
        assert len(cells) == num_chain > 0
        assert all(set(c.holders) == {chat.chat_id} for c in cells)
        assert "italic" in cell_content(cells[0], {})[1]
        await wait_for(pilot, lambda: any("pinned" in str(n.message) for n in app._notifications))
        await press(pilot, "f7")
        await wait_for(pilot, lambda: chat.chat_id not in app.pinned_chats, timeout=60)
        assert not pinned_cells(app)
