"""`llmchat bench typeahead`: prefill while typing (core/engine/warming.py) on vs off.

A chat with a long history (its blocks cached, as a chat the user has been in), then a message typed at a
human rate: TYPING_WPS words a second, a pause of PAUSE_S after every WORDS_PER_PAUSE words (when the app asks
the engine to warm the draft so far). Time is the engine's own: while the user types, the engine steps for as
long as the typing took, and stops early when it has nothing to do (so the bench lasts its compute, not the
typing). Then Enter: TTFT of the turn, with typeahead on and off. A second variant types the same message while
another chat streams a reply: that reply's TPOT with typing vs without (a draft never shares a step with a
request, so it must stay 1.0x).
"""
from __future__ import annotations

import time
from typing import Any

from ..api.events import Finished
from ..chats.conversation import Conversation
from ..engine.engine import LLMEngine
from ..text.prompt import prompt_ids_for
from .common import chat_turn, filler_text, fixed

TYPING_WPS = 3.0  # a fast typist (180 words a minute): the least time the engine gets
WORDS_PER_PAUSE = 4
PAUSE_S = 0.4


def _typed_turn(engine: LLMEngine, chat: Conversation, message: str, warm: bool,
                other: list[int] | None = None) -> tuple[Finished, Finished | None]:
    """Type `message` into `chat` (warming the draft at each pause when `warm`), then send it; with `other`, a
    prompt that streams in another chat from the first word on. Returns (the turn, the other reply)."""
    other_id = engine.add_request(other, fixed(64)) if other is not None else None
    done: dict[int, Finished] = {}
    words = message.split(" ")
    for end in range(WORDS_PER_PAUSE, len(words) + WORDS_PER_PAUSE, WORDS_PER_PAUSE):
        draft = " ".join(words[:end])
        if warm:
            engine.warm(chat.chat_id, prompt_ids_for(engine.tokenizer, chat.template_messages()
                                                     + [{"role": "user", "content": draft}], chat.token_ids))
        deadline = time.perf_counter() + WORDS_PER_PAUSE / TYPING_WPS + PAUSE_S
        while engine.has_work and time.perf_counter() < deadline:
            done.update((e.request_id, e) for e in engine.step() if isinstance(e, Finished))
    user, reply = chat.start_turn(message)
    prompt = prompt_ids_for(engine.tokenizer, chat.template_messages(), chat.token_ids)
    request_id = engine.add_request(prompt, fixed(8))
    for event in engine.run_until_done():
        if isinstance(event, Finished):
            done[event.request_id] = event
    result = done[request_id]
    chat.begin_reply(user, reply, prompt)
    chat.finish_reply(reply, result.text, "done", result.reason.value, output_ids=list(result.output_ids))
    return result, (done[other_id] if other_id is not None else None)


def run_typeahead(bench: Any) -> None:
    size = bench.size
    message = filler_text(size.typeahead_message_tokens, 0)
    ttft: dict[str, list[float]] = {"off": [], "on": []}
    tpot: dict[str, list[float]] = {"no typing": [], "typing, typeahead on": []}
    for _ in range(size.repeats):
        for variant in ("off", "on"):
            engine, salt = bench.engine(), bench.next_salt()
            chat = Conversation(salt)
            chat_turn(engine, chat, filler_text(size.restart_history_tokens, salt), 16)  # the history, cached
            result, _ = _typed_turn(engine, chat, f"[{salt}] {message}", warm=variant == "on")
            ttft[variant].append(result.metrics.ttft * 1e3)
            bench.log(f"typeahead {variant}: reused {result.metrics.num_cached_tokens} of "
                      f"{result.metrics.num_prompt_tokens}, TTFT {result.metrics.ttft * 1e3:.0f} ms")
        for variant in tpot:
            engine, salt = bench.engine(), bench.next_salt()
            chat = Conversation(salt)
            chat_turn(engine, chat, filler_text(size.restart_history_tokens, salt), 16)
            other = prompt_ids_for(engine.tokenizer, [{"role": "user", "content": filler_text(40, salt + 1000)}])
            if variant == "no typing":
                engine.add_request(other, fixed(64))
                (finished,) = [e for e in engine.run_until_done() if isinstance(e, Finished)]
            else:
                _, finished = _typed_turn(engine, chat, f"[{salt}] {message}", warm=True, other=other)
            tpot[variant].append(finished.metrics.tpot * 1e3)
    for variant, values in ttft.items():
        bench.results.add("typeahead", f"typeahead={variant}", "ttft", values, "ms")
    for variant, values in tpot.items():
        bench.results.add("typeahead", f"other chat streaming, {variant}", "tpot", values, "ms")
