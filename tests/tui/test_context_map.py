"""The context map (issue 27 item 6, F10): each message's share of the context, where its blocks are now (memory,
disk only, gone), and what a trim to fit the next turn would drop."""
from __future__ import annotations

from tui_helpers import SIZE, one_turn, press, screen_text, wait_for

from llmchat.core.chats.conversation import ChatSettings, Conversation, Message
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.inspect.context_map import DISK, GONE, MEMORY, block_tiers
from llmchat.core.api.params import SamplingParams
from llmchat.tui.actions.registry import ACTIONS
from llmchat.tui.text.context_map_text import context_map_text, trimmed_messages

SETTINGS = ChatSettings("You keep answers short. " * 8, 0.0, 1.0, 4)


def chat_of(spans: list[tuple[int, int]], max_tokens: int = 100) -> Conversation:
    chat = Conversation(1, settings=ChatSettings(None, 0.0, 1.0, max_tokens))
    for i, span in enumerate(spans):
        chat.messages.append(Message("user" if i % 2 == 0 else "assistant", f"message {i}", token_span=span))
    chat.token_ids = list(range(spans[-1][1]))
    return chat


def test_a_trim_drops_the_oldest_turns_until_the_next_turn_fits():
    chat = chat_of([(50, 250), (250, 450), (450, 650), (650, 850)], max_tokens=100)
    assert trimmed_messages(chat, context=2000, max_tokens=100) == []
    assert trimmed_messages(chat, context=900, max_tokens=100) == [0]  # 850 - 200 + 100 <= 900
    assert trimmed_messages(chat, context=700, max_tokens=100) == [0, 1]
    text = context_map_text(chat, [MEMORY] * 30 + [DISK] * 10 + [GONE] * 13, 900, 16)
    assert "850 tokens of a 900-token context (94%)" in text and "30 blocks in memory, 10 on disk only, 13 gone" in text
    assert text.count("← a trim drops it") == 1 and "drops the oldest 1 messages" in text
    assert "#1 user: message 0" in text and "█" in text and "▒" in text and "·" in text


def test_block_tiers_follow_the_cache(tiny_model, tmp_path):
    engine = LLMEngine(tiny_model, EngineConfig(kv_cache_bytes=4 << 20))
    ids = engine.tokenizer.encode("word " * 70, add_bos=False)
    assert block_tiers(engine, ids) == [GONE] * (len(ids) // 16)
    engine.add_request(ids, SamplingParams(temperature=0, max_tokens=2))
    list(engine.run_until_done())
    assert block_tiers(engine, ids) == [MEMORY] * (len(ids) // 16)  # the prompt's full blocks stay cached


async def test_f10_shows_the_chats_context_map(make_app):
    assert any(a.action == "context_map" and a.keys == "f10" for a in ACTIONS)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await one_turn(pilot, "What is a KV cache?", SETTINGS)
        await press(pilot, "f10")
        await wait_for(pilot, lambda: "Context map of #" in screen_text(app))
        text = screen_text(app)
        assert "#1 user: What is a KV cache?" in text and "#2 assistant:" in text and "█" in text
        assert "a trim would drop nothing" in text
