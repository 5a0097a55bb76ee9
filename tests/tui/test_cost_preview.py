"""The cost preview under the input box (issue 27 items 4 and 1, tui/actions/cost_preview.py): what the draft
would reuse and prefill, checked against what the turn then really reused; a long draft is prefilled while it
is typed, so Enter leaves only its last partial block."""
from __future__ import annotations

import re

from tui_helpers import SIZE, one_turn, press, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.inspect.cost_preview import CostPreview

SETTINGS = ChatSettings("You keep answers short and you explain caches with care. " * 6, 0.0, 1.0, 4)
PREVIEW = re.compile(r"will reuse ([\d,]+) · prefill ([\d,]+) · ~(\d+\.\d) s")


def preview_line(app) -> str:
    line = app.chat_screen.query_one("#cost-preview")
    return str(line.render()) if line.display else ""


async def test_the_preview_prices_the_draft_and_the_turn_reuses_what_it_said(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "What is a KV cache?", SETTINGS)
        chat = app.current
        assert preview_line(app) == ""  # an empty box: no line
        for key in "And why?":
            await press(pilot, "space" if key == " " else key)
        # prefilled while typing: the line says "ready: …" until the draft's blocks are in, then the price
        await wait_for(pilot, lambda: PREVIEW.search(preview_line(app)) and "ready:" not in preview_line(app),
                       timeout=30)
        reuse, prefill, _ = PREVIEW.search(preview_line(app)).groups()
        reuse, prefill = int(reuse.replace(",", "")), int(prefill.replace(",", ""))
        assert reuse > 0 and reuse % 16 == 0 and prefill > 0
        await press(pilot, "enter")
        await wait_for(pilot, lambda: not chat.busy and len(chat.conversation.messages) == 4, timeout=60)
        metrics = chat.conversation.messages[-1].metrics
        assert (metrics.num_cached_tokens, metrics.num_prompt_tokens) == (reuse, reuse + prefill)
        await wait_for(pilot, lambda: preview_line(app) == "")  # sent: the box is empty again
        assert "will reuse" not in screen_text(app)


def test_the_line_says_disk_reads_and_an_unmeasured_rate():
    assert CostPreview(130, 64, 32, 200.0).text() == "will reuse 96 (32 from disk) · prefill 34 · ~0.2 s"
    assert CostPreview(20, 0, 0, 0.0).text() == "will reuse 0 · prefill 20 · time not measured yet"


async def test_a_long_draft_is_prefilled_before_enter(make_app):
    app = make_app(typeahead=True)
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "Hi", SETTINGS)
        chat = app.current
        draft = "Tell me about caches and the blocks they keep for the next turn. " * 12  # ~170 tokens
        app.chat_screen.prompt.load_text(draft)
        await wait_for(pilot, lambda: PREVIEW.search(preview_line(app)) and "ready:" not in preview_line(app),
                       timeout=60)
        reuse, prefill, _ = PREVIEW.search(preview_line(app)).groups()
        assert int(prefill.replace(",", "")) <= 16  # all but the last partial block is in the cache already
        await press(pilot, "enter")
        await wait_for(pilot, lambda: not chat.busy and len(chat.conversation.messages) == 4, timeout=60)
        metrics = chat.conversation.messages[-1].metrics
        assert metrics.num_cached_tokens == int(reuse.replace(",", "")) == (metrics.num_prompt_tokens - 1) // 16 * 16


def test_room_left_shows_past_80_percent_of_the_context():
    from llmchat.core.inspect.cost_preview import room_left_text

    assert room_left_text(800, 1000) is None and room_left_text(900, None) is None
    assert room_left_text(801, 1000) == "199 of 1,000 tokens of context left"
    assert room_left_text(1000, 1000) == "1 token over the 1,000-token context: this turn will not fit"


async def test_a_draft_near_the_context_says_the_room_left(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "Hi", SETTINGS)
        context = app.bridge.info.context_length
        app.chat_screen.prompt.load_text("cache " * int(context * 0.8))
        await wait_for(pilot, lambda: "tokens of context left" in preview_line(app)
                       or "will not fit" in preview_line(app), timeout=30)
        assert PREVIEW.search(preview_line(app))  # the price stays on the line
