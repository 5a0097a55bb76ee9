"""The cost preview under the input box (issue 27 item 4): a moment after the user stops typing, the engine
tokenizes the draft as the next turn and looks its blocks up (core/inspect/cost_preview.py, no compute); the line
says "will reuse 3,968 · prefill 112 · ~0.4 s" at the measured prefill rate. Hidden while the draft is empty,
while the chat replies, and on a remote backend (which cannot see its server's cache). A mixin of LlmChatApp."""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual.content import Content
from textual.widgets import Static, TextArea

from .mixin import AppMixin

if TYPE_CHECKING:
    from ...core.inspect.cost_preview import CostPreview

PREVIEW_PAUSE_S = 0.3  # the typing pause after which the preview is asked for


class CostPreviewView(AppMixin):
    def on_text_area_changed(self, msg: TextArea.Changed) -> None:
        if msg.text_area.id != "prompt":
            return
        timer = getattr(self, "_preview_timer", None)
        if timer is not None:
            timer.stop()
        self._preview_timer = self.set_timer(PREVIEW_PAUSE_S, self.ask_cost_preview)

    def ask_cost_preview(self) -> None:
        """Ask the engine what the draft in the box would cost now; show it when the answer still fits."""
        session, screen = self.current, self.chat_screen
        draft = screen.prompt.message_text()
        if session is None or not draft.strip() or self.bridge.inspect is None or self.turns.why_not_send(session):
            self.show_cost_preview(None)
            return
        messages = session.conversation.template_messages() + [{"role": "user", "content": draft}]
        ids = list(session.conversation.token_ids)
        chat_id = session.chat_id

        async def ask_and_show() -> None:
            answer = await self.bridge.ask(lambda backend: backend.preview_cost(messages, ids))
            if self.ui_alive and self.current_id == chat_id and screen.prompt.message_text() == draft:
                self.show_cost_preview(answer)

        self.run_worker(ask_and_show(), group="cost-preview", exclusive=True, exit_on_error=False,
                        description="price the draft")

    def show_cost_preview(self, preview: CostPreview | None) -> None:
        line = self.chat_screen.query_one("#cost-preview", Static)
        line.display = preview is not None
        if preview is not None:
            line.update(Content(preview.text()))
