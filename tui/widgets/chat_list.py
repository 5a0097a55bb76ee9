"""The sidebar's list of chats: title, id, last activity and whether a reply is streaming."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Label, ListItem, ListView

from ..text import format as fmt
from ...core.text.sanitize import safe_text
from ..actions.model_switch import of_another_model
from ..session import ChatSession


def status_of(session: ChatSession) -> str:
    turn = session.turn
    if turn is None:
        return ""
    return "● queued" if turn.queued else f"● {turn.num_output_tokens} tok"


class ChatListItem(ListItem):
    def __init__(self, session: ChatSession) -> None:
        super().__init__(id=f"chat-{session.chat_id}")
        self.session = session

    def compose(self) -> ComposeResult:
        yield Label(classes="chat-title")
        yield Label(classes="chat-meta")

    def on_mount(self) -> None:
        self.refresh_from_session()

    def refresh_from_session(self) -> None:
        s = self.session
        self.set_class(s.busy, "-busy")
        labels = list(self.query(Label))
        if len(labels) != 2:  # not composed yet: on_mount will show it
            return
        status = status_of(s)
        meta = f"#{s.chat_id} · {fmt.when(s.conversation.updated_at)}" + (f" · {status}" if status else "")
        if of_another_model(s, getattr(self.parent, "loaded_model_id", None)):
            meta += " · other model"
        labels[0].update(Content(safe_text(s.conversation.title)))
        labels[1].update(Content(meta))


class ChatList(ListView):
    """Newest activity first. Enter or a click opens a chat (ListView.Selected)."""

    loaded_model_id: str | None = None  # chats whose ids are of another model are marked

    def show_loaded_model(self, model_id: str | None) -> None:
        self.loaded_model_id = model_id
        for item in self.query(ChatListItem):
            item.refresh_from_session()

    def item_for(self, chat_id: int) -> ChatListItem | None:
        for item in self.query(ChatListItem):
            if item.session.chat_id == chat_id:
                return item
        return None

    def index_of(self, chat_id: int) -> int | None:
        for i, item in enumerate(self.children):
            if isinstance(item, ChatListItem) and item.session.chat_id == chat_id:
                return i
        return None

    async def show(self, sessions: list[ChatSession], current: int | None) -> None:
        await self.clear()
        await self.extend([ChatListItem(s) for s in sessions])
        self.mark_current(current)

    def mark_current(self, chat_id: int | None) -> None:
        for item in self.query(ChatListItem):
            item.set_class(item.session.chat_id == chat_id, "-current")
        index = self.index_of(chat_id) if chat_id is not None else None
        if index is not None and self.index != index:
            self.index = index

    def refresh_chat(self, chat_id: int) -> None:
        item = self.item_for(chat_id)
        if item is not None:
            item.refresh_from_session()
