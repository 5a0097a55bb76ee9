"""The turn flow for the kill -9 soak (tests/test_kill9_soak.py): store + engine + disk tier, turn after turn,
with chat operations between; prints `DONE chat_id num_messages` once a turn's finish is stored."""
from __future__ import annotations

import sys

from llmchat.core.api.events import Finished, TextDelta
from llmchat.core.api.params import SamplingParams
from llmchat.core.chats.store import ChatStore
from llmchat.core.config import EngineConfig
from llmchat.core.engine.engine import LLMEngine
from llmchat.core.model.loader import load_model
from llmchat.core.text.prompt import prompt_ids_for

data_dir, kv_dir, model_dir, round_no = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = ChatStore(data_dir)
loaded = load_model(model_dir)
engine = LLMEngine(loaded, EngineConfig(kv_cache_bytes=4 << 20, kv_disk_bytes=1 << 26, kv_disk_dir=kv_dir))
print("READY", flush=True)
for turn in range(1000):
    chats = store.list_chats()
    conv = store.load_chat(chats[-1].chat_id) if chats and turn % 3 else store.create_chat()
    if turn % 2:
        print("OP", flush=True)  # the soak kills some rounds right here, as the rename is stored
        conv.rename(f"round {round_no} turn {turn}")  # a chat operation the kill may land in
    user, reply = conv.start_turn(f"tell me about number {round_no * 1000 + turn}")
    prompt = prompt_ids_for(loaded.tokenizer, conv.template_messages())
    conv.begin_reply(user, reply, prompt)
    engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    text, ids = [], []
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, TextDelta):
                text.append(event.text)
                ids.extend(event.token_ids)
                if len(ids) % 8 == 0:
                    conv.extend_reply(reply, list(ids), "".join(text))
            elif isinstance(event, Finished):
                conv.finish_reply(reply, event.text, "done", event.reason.value, None, event.metrics,
                                  list(event.output_ids))
    print(f"DONE {conv.chat_id} {len(conv.messages)}", flush=True)  # one write: PYTHONUNBUFFERED splits print's
