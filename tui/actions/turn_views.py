"""A turn on screen: Enter sends it, and what the screen does when it starts, finishes or is refused (the messages
TurnManager posts; SaveFailed is tui/actions/store_writes.py's). A mixin of LlmChatApp, like the other actions."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..messages import TurnFinished, TurnRefused, TurnStarted
from ..text.format import merged_draft
from .full_chat import offer_full_chat_choice, record_first_turn
from .mixin import AppMixin

if TYPE_CHECKING:
    from ..screens.chat import BannerView
    from ..widgets.prompt_input import PromptInput


class TurnViews(AppMixin):
    async def on_prompt_input_submitted(self, msg: PromptInput.Submitted) -> None:
        session = self.current
        if session is None:
            return
        why_not = self.turns.why_not_send(session)
        if why_not is not None:
            self.notify(why_not, severity="warning")
            return
        self.chat_screen.prompt.clear_message()  # a refusal puts it back
        if not self.turns.send(session, msg.text):
            self.chat_screen.prompt.set_message(msg.text)

    def on_banner_view_dismissed(self, msg: BannerView.Dismissed) -> None:
        if self.current is not None:
            self.current.banner = None
        self.chat_screen.show_banner(None)

    async def on_turn_started(self, msg: TurnStarted) -> None:
        if not self.ui_alive:
            return
        session, screen = msg.session, self.chat_screen
        await self.refresh_chat_list()
        if session.chat_id == self.current_id:
            await screen.transcript.add_turn(session)
            screen.show_banner(None)
            self.show_header()
            screen.panels.show_chat(session)

    async def on_turn_finished(self, msg: TurnFinished) -> None:
        if not self.ui_alive:
            return
        session, screen = msg.session, self.chat_screen
        record_first_turn(self, session)  # (a chat that continued a full one: the choice's measured cost)
        self.ask_resident_blocks(force=True)
        screen.chat_list.refresh_chat(session.chat_id)
        if session.chat_id == self.current_id:
            view = screen.transcript.reply_view(session.conversation.messages[-1])  # (its text: in finish())
            if view is not None:
                await self.guarded(view.finish())
            if not self.ui_alive:  # the app closed during that await: its widgets are going
                return
            screen.show_banner(session.banner)
            self.show_header()
            screen.panels.show_chat(session)
            self.ask_cost_preview()  # a draft typed while it replied: priced now that the reply is cached
        elif session.banner is not None:
            self.notify(f"#{session.chat_id}: {session.banner.text}", severity="warning", timeout=6)

    async def on_turn_refused(self, msg: TurnRefused) -> None:
        if not self.ui_alive:
            return
        session, text, screen = msg.session, msg.text, self.chat_screen
        screen.chat_list.refresh_chat(session.chat_id)
        self.show_engine_panels()
        if session.chat_id == self.current_id:
            screen.prompt.set_message(merged_draft(text, screen.prompt.message_text()))
            screen.show_banner(session.banner)
            screen.panels.show_chat(session)
            self.show_header()
            await screen.transcript.show(session)
            await offer_full_chat_choice(self, session, text)  # a message the context cannot hold: priced choices
        else:  # back in that chat's draft, before whatever was typed there
            self.drafts[session.chat_id] = merged_draft(text, self.drafts.get(session.chat_id, ""))
            self.notify(f"#{session.chat_id}: {session.banner.text}", severity="error", timeout=8, markup=False)
