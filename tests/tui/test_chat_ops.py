"""Pilot tests of the chat operations that reuse KV (regenerate, edit and resend, fork, undo), on the real
engine with the tiny model: each keeps the exact ids before the change, so the request metrics show every
full block before it reused; the store keeps the result across a restart; a fork shares its parent's
blocks (refcount 2 while both stream)."""
from __future__ import annotations

import asyncio

from tui_helpers import SIZE, capture, one_turn, press, quit_app, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.chats.store import ChatStore
from llmchat.tui.screens.edit_message import EditMessageScreen

BS = 16
SYSTEM = "You are a meticulous assistant for a team of engineers. " * 6  # several full blocks
SETTINGS = ChatSettings(SYSTEM, 0.0, 1.0, 10)


def full_blocks(num_tokens: int) -> int:
    return num_tokens // BS * BS


async def two_turns(pilot):
    await wait_for(pilot, lambda: pilot.app.bridge.ready)
    await one_turn(pilot, "What is a KV cache?", SETTINGS)
    await one_turn(pilot, "And what is a block?", SETTINGS)
    return pilot.app.current


async def test_regenerate_reuses_every_full_block_and_explains_it(make_app, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        chat = await two_turns(pilot)
        conversation = chat.conversation
        old_reply = conversation.messages[-1]
        prompt = conversation.token_ids[: old_reply.token_span[0]]
        await press(pilot, "ctrl+g")
        await wait_for(pilot, lambda: conversation.messages[-1] is not old_reply and not chat.busy)
        reply = conversation.messages[-1]
        assert len(conversation.messages) == 4
        assert conversation.token_ids[: reply.token_span[0]] == prompt, "the very same prompt ids"
        m = reply.metrics
        assert m.num_prompt_tokens == len(prompt) and m.num_cached_tokens == full_blocks(len(prompt) - 1)
        assert m.num_prefilled_tokens < BS + 1  # only the last partial block (and the last token)
        assert reply.explanation.cause == "partial-block"
        await pilot.pause(0.3)
        text = screen_text(app)
        assert f"reuse ended at {m.num_cached_tokens}: nothing new: only the last partial block" in text
        capture(app, "explainer_line")
        await press(pilot, "f9")
        await wait_for(pilot, lambda: "known but recomputed" in screen_text(app))
        capture(app, "explainer_detail")
        await press(pilot, "escape")
        ids = list(conversation.token_ids)
        await quit_app(pilot)
    with ChatStore(tmp_path / "data", readonly=True) as store:
        back = store.load_chat(chat.chat_id)
    assert back.token_ids == ids and len(back.messages) == 4 and back.messages[-1].content == reply.content


async def test_edit_and_resend_keeps_the_prefix_and_the_old_branch(make_app, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        chat = await two_turns(pilot)
        conversation = chat.conversation
        old_messages = [(m.role, m.content) for m in conversation.messages]
        old_ids = list(conversation.token_ids)
        second = conversation.messages[2]
        cut = second.token_span[0]
        app.edit_message(second)
        await wait_for(pilot, lambda: isinstance(app.screen, EditMessageScreen) and app.screen.query("TextArea"))
        app.screen.query_one("TextArea").load_text("And what is a page?")
        await press(pilot, "ctrl+s")
        await wait_for(pilot, lambda: len(conversation.messages) == 4 and not chat.busy
                       and conversation.messages[2].content == "And what is a page?")
        assert conversation.token_ids[:cut] == old_ids[:cut]
        m = conversation.messages[-1].metrics
        assert m.num_cached_tokens >= full_blocks(cut), (m, cut)
        assert conversation.messages[-1].explanation.cause == "new-text"
        forks = [s for s in app.sessions.values() if s.conversation.title.endswith("(before edit)")]
        assert len(forks) == 1
        fork = forks[0].conversation
        assert [(m.role, m.content) for m in fork.messages] == old_messages and fork.token_ids == old_ids
        await quit_app(pilot)
    with ChatStore(tmp_path / "data", readonly=True) as store:
        back, back_fork = store.load_chat(chat.chat_id), store.load_chat(fork.chat_id)
    assert back.messages[2].content == "And what is a page?" and back.token_ids[:cut] == old_ids[:cut]
    assert [(m.role, m.content) for m in back_fork.messages] == old_messages and back_fork.token_ids == old_ids


async def test_fork_shares_blocks_with_its_parent(make_app, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        parent = await two_turns(pilot)
        first_reply = parent.conversation.messages[1]
        await app.fork_at(first_reply)
        await wait_for(pilot, lambda: app.current is not parent)
        fork = app.current
        kept = parent.conversation.token_ids[: first_reply.token_span[1]]
        assert fork.conversation.token_ids == kept and len(fork.conversation.messages) == 2
        await one_turn(pilot, "Fork question", SETTINGS)
        m = fork.conversation.messages[-1].metrics
        assert m.num_cached_tokens == full_blocks(len(kept) - 1)  # every block the parent computed before it

        # both stream at once: the blocks of their common prefix are shared by refcount
        long = ChatSettings(SYSTEM, 0.0, 1.0, 400)
        for session, text in ((fork, "Go on at length"), (parent, "Tell me more")):
            await app.open_chat(session.chat_id)
            await one_turn_started(pilot, text, long)
        await wait_for(pilot, lambda: all(s.turn and s.turn.num_output_tokens >= 2 for s in (fork, parent)))
        block_map = await asyncio.wrap_future(app.bridge.service.block_map())
        common = next(i for i, (a, b) in enumerate(zip(fork.conversation.token_ids, parent.conversation.token_ids))
                      if a != b)
        shared = [c for c in block_map.cells if {fork.chat_id, parent.chat_id} <= set(c.holders)]
        assert len(shared) >= full_blocks(common) // BS > 0
        assert all(c.ref_count == 2 and c.state == "used" for c in shared)
        stats = block_map.stats
        assert (block_map.count("used"), block_map.count("cached"), block_map.count("free")) == (
            stats.num_blocks_used, stats.num_blocks_cached_free, stats.num_blocks_free)
        await press(pilot, "f8")
        await wait_for(pilot, lambda: "KV block map" in screen_text(app) and "engine stats at" in screen_text(app))
        await pilot.pause(1.2)
        capture(app, "block_map_two_forks")
        assert "+" in screen_text(app)  # shared cells
        await press(pilot, "escape")
        for s in (fork, parent):
            app.turns.cancel(s)
        await wait_for(pilot, lambda: not fork.busy and not parent.busy)
        await quit_app(pilot)
    with ChatStore(tmp_path / "data", readonly=True) as store:
        assert store.load_chat(fork.chat_id).token_ids[: len(kept)] == kept


async def one_turn_started(pilot, text: str, settings: ChatSettings) -> None:
    app = pilot.app
    chat = app.current
    app.store.update_settings(chat.chat_id, settings)
    chat.conversation.settings = settings
    app.chat_screen.prompt.load_text(text)
    await press(pilot, "enter")
    await wait_for(pilot, lambda: chat.busy)


async def test_undo_last_turn(make_app, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        chat = await two_turns(pilot)
        conversation = chat.conversation
        user = conversation.messages[2]
        ids = conversation.token_ids[: user.token_span[0]]
        await press(pilot, "f4")
        await wait_for(pilot, lambda: len(conversation.messages) == 2)
        assert conversation.token_ids == ids
        assert app.chat_screen.prompt.text == "And what is a block?"
        await press(pilot, "enter")  # sent again: the same prompt, every full block reused
        await wait_for(pilot, lambda: len(conversation.messages) == 4 and not chat.busy)
        m = conversation.messages[-1].metrics
        assert m.num_cached_tokens >= full_blocks(len(ids) - 1)
        await press(pilot, "f4")
        await wait_for(pilot, lambda: len(conversation.messages) == 2)
        await quit_app(pilot)
    with ChatStore(tmp_path / "data", readonly=True) as store:
        back = store.load_chat(chat.chat_id)
    assert len(back.messages) == 2 and back.token_ids == ids


async def test_keys_on_a_focused_message_fork_and_explain(make_app):
    """f on a focused user message forks before it (its text goes to the new chat's input); w on a reply
    opens its explanation."""
    from llmchat.tui.screens.info import InfoScreen
    from llmchat.tui.widgets.transcript import AssistantMessage, UserMessage

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        parent = await two_turns(pilot)
        views = list(app.chat_screen.transcript.query(UserMessage))
        views[1].focus()
        await press(pilot, "f")
        await wait_for(pilot, lambda: app.current is not parent)
        fork = app.current.conversation
        first_reply = parent.conversation.messages[1]
        assert fork.token_ids == parent.conversation.token_ids[: first_reply.token_span[1]]
        assert app.chat_screen.prompt.text == "And what is a block?"
        await app.open_chat(parent.chat_id)
        list(app.chat_screen.transcript.query(AssistantMessage))[-1].focus()
        await press(pilot, "w")
        await wait_for(pilot, lambda: isinstance(app.screen, InfoScreen))
        assert "new to this chat" in screen_text(app)
        await press(pilot, "escape")
