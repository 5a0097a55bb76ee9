"""The main screen: chat list | conversation (header, loading bar, transcript, banner, input) | panels."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, ProgressBar, Static

from ...core.api.protocol import BackendInfo
from ..actions.model_switch import of_another_model
from ..text.sampling_fields import sampling_extras
from ...core.text.sanitize import safe_text
from ..session import Banner, ChatSession
from ..widgets.chat_list import ChatList
from ..widgets.panels import Panels
from ..widgets.prompt_input import PromptInput
from ..widgets.transcript import Transcript


class BannerView(Static):
    """A chat's banner (refused prompt, full context, cut reply); a click dismisses it."""

    class Dismissed(Message):
        pass

    def on_click(self) -> None:
        self.display = False
        self.post_message(self.Dismissed())


class ChatScreen(Screen):
    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            with Vertical(id="sidebar"):
                yield Static(Content("llmchat"), id="brand")
                yield Static(Content("loading the model…"), id="model-status")
                yield ChatList(id="chat-list")
            with Vertical(id="conversation"):
                yield Static(id="chat-header")
                with Horizontal(id="loading"):
                    yield ProgressBar(total=None, show_eta=False, show_percentage=False)
                    yield Static(Content("loading the model (a first start fetches and converts it)…"), id="loading-line")
                yield Transcript(id="transcript")
                yield BannerView(id="banner")
                yield PromptInput(id="prompt")
                yield Static(id="cost-preview")
            yield Panels(id="panels")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#banner").display = False
        self.query_one("#cost-preview").display = False
        self.query_one(PromptInput).focus()

    # -- pieces the app updates -------------------------------------------------------------
    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def chat_list(self) -> ChatList:
        return self.query_one(ChatList)

    @property
    def panels(self) -> Panels:
        return self.query_one(Panels)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    def show_progress(self, line: str) -> None:
        self.query_one("#loading-line", Static).update(Content(safe_text(line)))

    def show_engine_ready(self, info: BackendInfo) -> None:
        self.query_one("#loading").display = False
        self.query_one("#model-status", Static).update(
            Content(f"{safe_text(info.facts.line() if info.facts else info.model_name)}\n"
                    f"{info.device} · context {info.context_length:,}")
        )

    def show_engine_loading(self, line: str) -> None:
        """Back to the loading state (a model switch): the progress bar and line, until ready or failed."""
        self.query_one("#loading").display = True
        self.query_one("#loading").remove_class("-error")
        self.query_one(ProgressBar).display = True
        self.show_progress(line)
        self.query_one("#model-status", Static).update(Content("switching the model…"))

    def show_engine_failed(self, error: str) -> None:
        self.query_one("#loading").add_class("-error")
        self.query_one(ProgressBar).display = False
        self.show_progress(f"The model could not start: {error}. Your chats can still be read and exported.")
        self.query_one("#model-status", Static).update(Content("model failed to load"))

    def show_header(self, session: ChatSession | None, max_context: int | None,
                    loaded_model_id: str | None = None) -> None:
        if session is None:
            text = "no chat"
        else:
            s = session.settings
            turn = session.turn
            num = (len(turn.prompt_ids) + turn.num_output_tokens if turn and turn.prompt_ids
                   else len(session.conversation.token_ids))
            history = session.conversation.finished_metrics()
            if not num and history:  # a remote backend keeps no ids: the server's count of the last turn
                num = history[-1].num_prompt_tokens + history[-1].num_output_tokens
            ctx = f"context {num:,}/{max_context:,}" if max_context else f"{num:,} tokens"
            system = "custom system" if s.system_prompt else "default system"
            other = (" · from another model: its next turn is tokenized afresh"
                     if of_another_model(session, loaded_model_id) else "")
            text = (f"#{session.chat_id} {safe_text(session.conversation.title)}{other}\n"
                    f"{ctx} · temp {s.temperature:g} · top-p {s.top_p:g} · max {s.max_tokens:,} · {system}")
            extras = sampling_extras(s)  # (a third line, only when set)
            text += "\n" + " · ".join(extras) if extras else ""
        self.query_one("#chat-header", Static).update(Content(text))

    def show_banner(self, banner: Banner | None) -> None:
        widget = self.query_one("#banner", Static)
        widget.display = banner is not None
        if banner is not None:
            widget.set_classes(f"-{banner.kind}")
            widget.update(Content(safe_text(banner.text) + "   (click to dismiss)"))
