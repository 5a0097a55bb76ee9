"""A conversation change persists itself (core/chats/conversation.py + store.py): over random operations (turns
that stream, finish, get refused or regenerated; cuts, forks, model switches, renames, settings, restarts), the
conversation reloaded from disk equals the one in memory after every step."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from llmchat.core.api.metrics import RequestMetrics
from llmchat.core.chats.conversation import ChatSettings, Conversation, Message
from llmchat.core.chats.rows import metrics_to_json
from llmchat.core.chats.store import ChatStore

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
IDS = st.lists(st.integers(0, 49151), max_size=6)
SETTINGS = st.builds(ChatSettings, st.none() | TEXT, st.sampled_from([0.0, 0.7, 1.3]), st.just(0.9),
                     st.integers(1, 4096), st.integers(0, 50), st.none() | st.integers(0, 2**63 - 1),
                     st.lists(st.text(min_size=1, max_size=4), max_size=3).map(tuple))


def snapshot(c: Conversation) -> tuple:
    """Everything a conversation stores (metrics as their JSON: NaN equals NaN there)."""
    return (c.chat_id, c.title, c.title_auto, c.created_at, c.updated_at, c.settings, c.token_ids, c.model_id,
            [(m.message_id, m.role, m.content, m.status, m.finish_reason, m.error, metrics_to_json(m.metrics),
              m.created_at, m.token_span) for m in c.messages])


class ConversationStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="llmchat-conv-"))
        self.store = ChatStore(self.folder)
        self.chats: list[Conversation] = [self.store.create_chat()]
        self.turns: dict[int, tuple[Message, Message, bool]] = {}  # chat id -> (user, reply, prompt taken)
        self.model = "model-0"

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def idle(self, i: int) -> Conversation | None:
        chat = self.chats[i % len(self.chats)]
        return None if chat.chat_id in self.turns else chat

    def in_flight(self, i: int) -> tuple[Conversation, Message, Message, bool] | None:
        busy = [c for c in self.chats if c.chat_id in self.turns]
        if not busy:
            return None
        chat = busy[i % len(busy)]
        return (chat, *self.turns[chat.chat_id])

    # -- turns ------------------------------------------------------------------------------
    @rule(i=st.integers(0, 9), text=TEXT)
    def start_turn(self, i: int, text: str) -> None:
        if (chat := self.idle(i)) is not None:
            chat.adopt_model(self.model)  # (the app does this as it submits: a switch drops the old model's ids)
            user, reply = chat.start_turn(text)
            self.turns[chat.chat_id] = (user, reply, False)

    @rule(i=st.integers(0, 9), new_ids=IDS, extends=st.booleans())
    def take_prompt(self, i: int, new_ids: list[int], extends: bool) -> None:
        """The engine's Started: the chat's ids plus the new message's, or a fresh tokenization."""
        if (turn := self.in_flight(i)) is not None and not turn[3]:
            chat, user, reply, _ = turn
            chat.begin_reply(user, reply, (chat.token_ids if extends else []) + new_ids + [1])
            self.turns[chat.chat_id] = (user, reply, True)

    @rule(i=st.integers(0, 9), more=IDS, text=TEXT)
    def progress(self, i: int, more: list[int], text: str) -> None:
        if (turn := self.in_flight(i)) is not None and turn[3]:
            chat, _, reply, _ = turn
            chat.extend_reply(reply, chat.token_ids[reply.token_span[0]:] + more, reply.content + text)

    @rule(i=st.integers(0, 9), more=IDS, text=TEXT, reason=st.sampled_from(["stop", "length", "abort", "error"]),
          with_metrics=st.booleans())
    def finish(self, i: int, more: list[int], text: str, reason: str, with_metrics: bool) -> None:
        if (turn := self.in_flight(i)) is not None:
            chat, _, reply, begun = turn
            output = chat.token_ids[reply.token_span[0]:] + more if begun else None
            metrics = RequestMetrics(len(chat.token_ids), 0, len(more), 0.01, float("nan"), float("nan")) \
                if with_metrics else None
            status = {"stop": "done", "length": "done", "abort": "stopped", "error": "error"}[reason]
            chat.finish_reply(reply, text, status, reason, "cut short" if reason == "error" else None, metrics, output)
            del self.turns[chat.chat_id]

    @rule(i=st.integers(0, 9))
    def refuse(self, i: int) -> None:
        """The engine refused the prompt before it began: the turn is undone."""
        if (turn := self.in_flight(i)) is not None and not turn[3]:
            chat, user, reply, _ = turn
            chat.undo_turn(user, reply)
            del self.turns[chat.chat_id]

    @rule(i=st.integers(0, 9))
    def regenerate(self, i: int) -> None:
        chat = self.idle(i)
        if chat is not None and chat.messages and chat.messages[-1].role == "assistant":
            chat.drop_last_reply()
            chat.adopt_model(self.model)
            user, reply = chat.start_reply()
            self.turns[chat.chat_id] = (user, reply, False)

    # -- branches, model, settings ----------------------------------------------------------
    @rule(i=st.integers(0, 9), at=st.integers(0, 30))
    def cut(self, i: int, at: int) -> None:
        if (chat := self.idle(i)) is not None and chat.messages:
            chat.cut_at(chat.messages[at % len(chat.messages)])

    @rule(i=st.integers(0, 9), at=st.integers(-1, 30), title=st.none() | TEXT.filter(str.strip))
    def fork(self, i: int, at: int, title: str | None) -> None:
        chat = self.idle(i)
        if chat is not None and len(self.chats) < 4:
            upto = chat.messages[at % len(chat.messages)] if chat.messages and at >= 0 else None
            self.chats.append(chat.branch(upto, title))

    @rule()
    def switch_model(self) -> None:
        self.model = f"model-{int(self.model.split('-')[1]) + 1}"

    @rule(i=st.integers(0, 9), title=TEXT.filter(str.strip))
    def rename(self, i: int, title: str) -> None:
        self.chats[i % len(self.chats)].rename(title)

    @rule(i=st.integers(0, 9), new=SETTINGS)
    def change_settings(self, i: int, new: ChatSettings) -> None:
        self.chats[i % len(self.chats)].update_settings(new)

    @rule()
    def new_chat(self) -> None:
        if len(self.chats) < 4:
            self.chats.append(self.store.create_chat())

    @rule()
    def restart(self) -> None:
        """The app closes (each reply in flight is kept as interrupted) and a new one opens the same data dir."""
        for chat in self.chats:
            if chat.chat_id in self.turns:
                _, reply, begun = self.turns.pop(chat.chat_id)
                chat.finish_reply(reply, reply.content, "interrupted", "abort",
                                  output_ids=chat.token_ids[reply.token_span[0]:] if begun else None)
        self.store.close()
        self.store = ChatStore(self.folder)
        self.chats = [self.store.load_chat(c.chat_id) for c in self.chats]

    @invariant()
    def disk_equals_memory(self) -> None:
        for chat in self.chats:
            assert chat.store is self.store
            assert snapshot(self.store.load_chat(chat.chat_id)) == snapshot(chat)


ConversationStoreMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_a_conversation_reloaded_from_disk_equals_the_one_in_memory = ConversationStoreMachine.TestCase


def test_a_model_switch_then_a_restart_cuts_at_the_new_ids(tmp_path):
    """The drift this replaces: forget_ids cleared the spans in memory while disk kept the old model's; after a
    restart a cut sliced the new model's ids at the old model's offsets."""
    with ChatStore(tmp_path) as store:
        chat = store.create_chat()
        chat.adopt_model("old")
        user, reply = chat.start_turn("one")
        chat.begin_reply(user, reply, [5, 5, 5, 5])
        chat.finish_reply(reply, "a", "done", "stop", output_ids=[6, 6])
        chat.adopt_model("new")  # a model switch: the old ids and spans go, on disk too
        assert chat.token_ids == [] and all(m.token_span is None for m in chat.messages)
        user2, reply2 = chat.start_turn("two")
        chat.begin_reply(user2, reply2, [9] * 10)  # the new model's fresh tokenization of the whole chat
        chat.finish_reply(reply2, "b", "done", "stop", output_ids=[8])
    with ChatStore(tmp_path) as store:
        back = store.load_chat(chat.chat_id)
        assert [m.token_span for m in back.messages] == [None, None, (0, 10), (10, 11)]
        back.cut_at(back.messages[1])  # no span known: nothing of the new ids is kept at an old offset
        assert back.token_ids == [] and snapshot(store.load_chat(chat.chat_id)) == snapshot(back)
