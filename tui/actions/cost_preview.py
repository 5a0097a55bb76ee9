"""The cost preview under the input box (issue 27 item 4) and prefill while typing (item 1): a moment after the
user stops typing, the engine tokenizes the draft as the next turn, looks its blocks up (core/inspect/
cost_preview.py) and, unless `--no-typeahead`, prefills it in its idle steps (core/engine/warming.py); the line
says "ready: 1,024 of 1,984 tokens · will reuse 1,024 · prefill 986 · ~1.9 s" while that runs (asked again every
half second), then "will reuse 1,984 · prefill 26 · ~0.1 s". Hidden while the draft is empty, while the chat
replies, and on a remote backend (which cannot see its server's cache). A mixin of LlmChatApp."""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual.content import Content
from textual.css.query import NoMatches
from textual.widgets import Static, TextArea

from ...core.inspect.cost_preview import room_left_text
from .mixin import AppMixin

if TYPE_CHECKING:
    from ...core.inspect.cost_preview import CostPreview

PREVIEW_PAUSE_S = 0.3  # the typing pause after which the preview is asked for (and the draft prefilled)
WARMING_POLL_S = 0.5  # while the draft is prefilled, how often the line is refreshed


class CostPreviewView(AppMixin):
    def on_text_area_changed(self, msg: TextArea.Changed) -> None:
        if msg.text_area.id != "prompt":
            return
        self._ask_cost_preview_in(PREVIEW_PAUSE_S)

    def _ask_cost_preview_in(self, seconds: float) -> None:
        timer = getattr(self, "_preview_timer", None)
        if timer is not None:
            timer.stop()
        self._preview_timer = self.set_timer(seconds, self.ask_cost_preview)

    def ask_cost_preview(self) -> None:
        """Ask the engine what the draft in the box would cost now; show it when the answer still fits."""
        if not self.ui_alive:  # the app is closing: the timer outlived the screen
            return
        session, screen = self.current, self.chat_screen
        try:
            draft = screen.prompt.message_text()
        except NoMatches:  # the screen's widgets are gone (the app is closing)
            return
        if session is None or not draft.strip() or self.bridge.inspect is None or self.turns.why_not_send(session):
            self.show_cost_preview(None)
            return
        messages = session.conversation.template_messages() + [{"role": "user", "content": draft}]
        ids = list(session.conversation.token_ids)
        chat_id, warm = session.chat_id, self.typeahead

        async def ask_and_show() -> None:
            answer = await self.bridge.ask(lambda backend: backend.preview_cost(messages, ids, chat_id, warm))
            if self.ui_alive and self.current_id == chat_id and screen.prompt.message_text() == draft:
                self.show_cost_preview(answer)
                if answer is not None and answer.warming:
                    self._ask_cost_preview_in(WARMING_POLL_S)

        self.run_worker(ask_and_show, group="cost-preview", exclusive=True, exit_on_error=False,
                        description="price the draft")

    def warm_on_focus(self, session) -> None:
        """Opening a chat brings what it already said back into memory in the engine's idle steps (its blocks read
        from the disk tier, or computed), so its first turn costs what a turn in a chat that never left costs."""
        ids = list(session.conversation.token_ids)
        if not self.typeahead or self.bridge.inspect is None or not ids or session.busy:
            return
        chat_id = session.chat_id

        async def warm() -> None:
            await self.bridge.ask(lambda backend: backend.warm_chat(chat_id, ids))

        self.run_worker(warm, group="warm-on-focus", exclusive=True, exit_on_error=False, description="warm the chat")

    def show_cost_preview(self, preview: CostPreview | None) -> None:
        """The draft's price, and the room left in the context once the chat (or the draft's turn) passes 80%."""
        line = self.chat_screen.query_one("#cost-preview", Static)
        session, info = self.current, self.bridge.info
        num_tokens = preview.num_prompt_tokens if preview else (
            len(session.conversation.token_ids) if session is not None else 0)
        parts = [preview.text()] if preview is not None else []
        room = room_left_text(num_tokens, info.context_length if info else None)
        parts += [room] if room else []
        line.display = bool(parts)
        if parts:
            line.update(Content(" · ".join(parts)))
