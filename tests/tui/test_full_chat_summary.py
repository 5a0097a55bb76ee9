"""The full chat's summary option (issue 27 item 5, tui/actions/chat_summary.py): priced before it runs, it streams a
summary through the backend and starts a new chat from it with the message waiting; cancelled or failed, nothing is
created; every option's choice and measured cost is recorded on the new chat and survives a reopen."""
from __future__ import annotations

import math
import time

from tui_helpers import SIZE, capture, one_turn, press, screen_text, wait_for

from textual.widgets import Static

from llmchat.core.backends.service import EngineService
from llmchat.core.chats.conversation import ChatSettings, Conversation, Message
from llmchat.core.chats.store import ChatStore
from llmchat.tui.screens.full_chat_choice import FullChatChoiceScreen
from llmchat.tui.screens.summary_progress import SummaryProgressScreen
from llmchat.tui.text import full_chat
from llmchat.tui.text.full_chat import SUMMARY_INSTRUCTION, summary_choice, summary_messages

SETTINGS = ChatSettings(None, 0.0, 1.0, 4)
MESSAGE = "token " * 450  # with the two turns below, past the tiny model's 1,024-token context


def test_the_summary_is_priced_from_what_is_not_cached_plus_its_reply_at_the_measured_tpot():
    chat = Conversation(1, settings=ChatSettings(None, 0.0, 1.0, 10), messages=[Message("user", "hi")])
    choice = summary_choice(chat, num_prompt_tokens=640, num_reused_tokens=608, message_tokens=300, context=2000,
                            prefill_rate=500.0, recent_tpot=(0.02, float("nan"), 0.04, 0.03))
    budget = full_chat.SUMMARY_MAX_TOKENS
    first = full_chat.SUMMARY_FRAME_TOKENS + budget + 300  # the new chat's first prompt, all of it prefilled
    assert (choice.kind, choice.max_summary_tokens, choice.num_prefill_tokens) == ("summary", budget, 32 + first)
    assert math.isclose(choice.seconds, (32 + first) / 500.0 + budget * 0.03)  # the median TPOT
    assert f"prefill 32 tokens (608 cached) + write ≤{budget}, then ≤{first} in the new chat · ~" in choice.text
    # little room left in the context for the summary's reply: a smaller budget, or no option at all
    assert summary_choice(chat, 1900, 1800, 300, 2000, 500.0, ()).max_summary_tokens == 100
    assert math.isnan(summary_choice(chat, 1900, 1800, 300, 2000, 0.0, ()).seconds)
    assert summary_choice(chat, 1990, 1800, 300, 2000, 500.0, (0.03,)) is None
    messages = summary_messages(chat)
    assert messages[-1] == {"role": "user", "content": SUMMARY_INSTRUCTION} and len(chat.template_messages()) == 1


async def fill_and_overflow(pilot) -> tuple[object, list]:
    """Two turns of ~300 tokens, then a message that does not fit: the choice opens, the summary listed first."""
    app = pilot.app
    await one_turn(pilot, "cache " * 300, SETTINGS)
    await one_turn(pilot, "block " * 300, SETTINGS)
    full = app.current
    before = ([(m.role, m.content, m.token_span) for m in full.conversation.messages], list(full.conversation.token_ids))
    app.chat_screen.prompt.load_text(MESSAGE)
    await press(pilot, "enter")
    await wait_for(pilot, lambda: isinstance(app.screen, FullChatChoiceScreen), timeout=30)
    return full, before


def origin_line(app) -> str:
    """The origin line at the top of the current chat (scrolled out of view under long messages)."""
    return str(app.chat_screen.transcript.query_one(".origin", Static).content)


def notices(app) -> list[str]:
    return [n.message for n in app._notifications if "ready (" not in n.message]  # (not the model's "ready")


def unchanged(full, before) -> bool:
    c = full.conversation
    return ([(m.role, m.content, m.token_span) for m in c.messages], list(c.token_ids)) == before and not c.origin


async def test_the_summary_option_runs_and_starts_a_new_chat_with_the_summary_and_the_message(make_app, tmp_path):
    app = make_app(tmp_path / "data")
    async with app.run_test(size=SIZE) as pilot:
        full, before = await fill_and_overflow(pilot)
        text = screen_text(app)
        assert "1. Continue from a summary the model writes (new chat): prefill " in text  # priced before it runs
        assert "cached) + write ≤256, then ≤" in text and "2. Drop the oldest 1 turns" in text
        assert app.summary_run is None and len(app.sessions) == 1
        capture(app, "summary-choice")
        await pilot.click("#choice-summary")
        await wait_for(pilot, lambda: app.current is not full, timeout=60)
        new = app.current.conversation
        assert new.title.endswith("(from a summary)") and new.messages == [] and new.token_ids == []
        system = new.settings.system_prompt
        assert system.startswith(f"Summary of chat #{full.chat_id} (") and len(system.split(":\n", 1)[1]) > 0
        assert app.chat_screen.prompt.message_text() == MESSAGE  # waits there for Enter
        assert unchanged(full, before)  # the full chat is unchanged: no instruction, no summary in it
        origin = new.origin
        assert (origin.from_chat_id, origin.how, origin.first_turn) == (full.chat_id, "summary", None)
        assert 0 < origin.summary.num_output_tokens <= 256 and origin.summary.num_prompt_tokens > 600
        assert f"Continued from #{full.chat_id} by a summary the model wrote: summary " in origin_line(app)
        capture(app, "summary-chat-new")
        await press(pilot, "enter")
        await wait_for(pilot, lambda: len(new.messages) == 2 and not app.current.busy, timeout=60)
        assert new.messages[1].status == "done" and new.origin.first_turn == new.messages[1].metrics
        assert f"first turn here {new.origin.first_turn.num_prefilled_tokens:,} tokens prefilled" in origin_line(app)
        capture(app, "summary-chat")
        new_id = new.chat_id
    with ChatStore(tmp_path / "data") as store:  # reopened: the record and the measured cost are still there
        reopened = store.load_chat(new_id)
        assert reopened.origin == new.origin and reopened.settings.system_prompt == system
        assert store.load_chat(full.chat_id).origin is None


def slow_steps(monkeypatch, seconds: float = 0.05) -> None:
    """Each engine step takes a while longer, so that the summary is still being written when Esc comes."""
    step = EngineService._step

    def slowly(self):
        time.sleep(seconds)
        return step(self)

    monkeypatch.setattr(EngineService, "_step", slowly)


async def test_cancelling_the_summary_creates_nothing(make_app, monkeypatch):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        full, before = await fill_and_overflow(pilot)
        slow_steps(monkeypatch)
        await pilot.click("#choice-summary")
        await wait_for(pilot, lambda: isinstance(app.screen, SummaryProgressScreen)
                       and "tokens written · Esc cancels" in screen_text(app), timeout=60)
        await press(pilot, "escape")  # the usual stop key
        await wait_for(pilot, lambda: app.summary_run is None and not isinstance(app.screen, SummaryProgressScreen),
                       timeout=30)
        await pilot.pause(0.2)
        assert list(app.sessions) == [full.chat_id] and app.current is full and unchanged(full, before)
        assert app.chat_screen.prompt.message_text() == MESSAGE  # the message stays in the box
        assert notices(app) == [f"The summary was cancelled: nothing was created; #{full.chat_id} and your message "
                                "are as they were."]  # one notice
        assert len(app.store.list_chats()) == 1


async def test_a_failed_summary_creates_nothing(make_app, monkeypatch):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        full, before = await fill_and_overflow(pilot)
        # priced already; now the request itself outgrows the context, and the engine refuses it
        monkeypatch.setattr(full_chat, "SUMMARY_INSTRUCTION", "summarize " * 1200)
        await pilot.click("#choice-summary")
        await wait_for(pilot, lambda: any("The summary failed (" in n for n in notices(app)), timeout=60)
        assert len(notices(app)) == 1 and "context" in notices(app)[0]
        assert app.summary_run is None and not isinstance(app.screen, SummaryProgressScreen)
        assert list(app.sessions) == [full.chat_id] and unchanged(full, before)
        assert app.chat_screen.prompt.message_text() == MESSAGE and len(app.store.list_chats()) == 1


async def test_trim_and_fork_record_their_choice_and_measured_first_turn(make_app, tmp_path):
    app = make_app(tmp_path / "data")
    async with app.run_test(size=SIZE) as pilot:
        full, before = await fill_and_overflow(pilot)
        await pilot.click("#choice-fork")
        await wait_for(pilot, lambda: app.current is not full, timeout=30)
        fork = app.current.conversation
        # the latest reply after which the message fits is #2: the fork begins with the first turn
        assert (fork.origin.how, fork.origin.num_start_messages, fork.origin.first_turn) == ("fork", 2, None)
        assert "as a fork that leaves room: first turn here not sent yet; priced at " in origin_line(app)
        await press(pilot, "enter")
        await wait_for(pilot, lambda: len(fork.messages) == 4 and not app.current.busy, timeout=60)
        measured = fork.messages[3].metrics
        assert fork.origin.first_turn == measured and measured.num_prefilled_tokens < fork.origin.estimated_tokens + 16
        assert f"first turn here {measured.num_prefilled_tokens:,} tokens prefilled" in origin_line(app)
        await app.open_chat(full.chat_id)
        assert unchanged(full, before)
        fork_id = fork.chat_id
    with ChatStore(tmp_path / "data") as store:
        assert store.load_chat(fork_id).origin.first_turn == measured
