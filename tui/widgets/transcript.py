"""The conversation: user messages as plain text, replies as Markdown streamed in place, a line of
metrics under each reply. Everything shown goes through safe_text and is never parsed as markup."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Markdown, Static

from ...core.chats.conversation import Message
from ..text import format as fmt
from ..text.cache_text import explanation_line
from ..text.chat_origin import origin_block
from ..text.draft_marks import drafted_share, marked_reply
from ...core.text.reasoning import split_reasoning
from ...core.text.sanitize import safe_text
from ..session import ChatSession, Turn
from .reasoning_block import ReasoningBlock, reasoning_title
from .code_fence import ReplyMarkdown


WELCOME = (
    "Type a message below and press Enter. Ctrl+J adds a new line; Esc stops a reply.\n"
    "Several chats can stream at once: start a long answer, press Ctrl+N, ask something else.\n"
    "The panels (right; Ctrl+B) show what each turn costs: time to first token, time per token, KV blocks."
)


def shown(text: str) -> str:
    head, note = fmt.cut_for_display(text)
    return safe_text(head) + note


class MessageView(Vertical, can_focus=True):
    """One message; focus it (click or Tab) and press c to copy it."""

    BINDINGS = [Binding("c", "copy", "Copy message"), Binding("f", "fork", "Fork here")]

    def __init__(self, message: Message) -> None:
        super().__init__(classes=f"message -{message.role}")
        self.message = message

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.message.content)
        self.notify(f"Copied {len(self.message.content):,} characters", timeout=2)

    async def action_fork(self) -> None:
        await self.app.fork_at(self.message)  # (tui/actions/cache_ops.py)


class UserMessage(MessageView):
    BINDINGS = [Binding("e", "edit", "Edit & resend")]

    def action_edit(self) -> None:
        self.app.edit_message(self.message)

    def compose(self) -> ComposeResult:
        yield Static(Content(shown(self.message.content)), classes="body")


def footer_text(message: Message, live: str | None = None) -> str:
    if live is not None:
        return live
    status = message.status
    line = fmt.turn_line(message.metrics) if message.metrics else ""
    prefix = {
        "stopped": "stopped",
        "interrupted": "interrupted: llmchat closed mid-reply",
        "error": f"cut short: {message.error}" if message.error else "cut short",
    }.get(status, "")
    text = " · ".join(p for p in (prefix, line) if p)
    if message.explanation is not None:
        text += "\n" + explanation_line(message.explanation)
    return text


class AssistantMessage(MessageView):
    """A reply: its reasoning block (tui/widgets/reasoning_block.py; hidden when it has none), its answer as
    Markdown, its metrics line."""

    BINDINGS = [Binding("w", "why", "Why this reuse"), Binding("r", "toggle_reasoning", "Reasoning")]

    def action_why(self) -> None:
        self.app.explain_reply(self.message)

    def action_toggle_reasoning(self) -> None:
        self.toggle_reasoning()

    def __init__(self, message: Message, turn: Turn | None = None, live: str | None = None) -> None:
        super().__init__(message)
        if turn is not None:  # streaming: the text split so far
            self._raw, self._reasoning, self._initial = turn.text, turn.reasoning, turn.content
        else:
            self._raw = message.content
            self._reasoning, self._initial = split_reasoning(self._raw, True if message.reasoning_open else None)
        self._streaming = turn is not None
        self._live = live
        self.num_chars_shown = len(self._raw if self.marks_drafts else self._initial)  # raw text / answer

    @property
    def marks_drafts(self) -> bool:
        """The app's "Mark accepted drafts" toggle: plain text with kept drafted tokens underlined."""
        return bool(getattr(self.app, "mark_drafts", False))

    def compose(self) -> ComposeResult:
        if self.marks_drafts:  # the raw text (tags included): draft spans index it
            yield Static(marked_reply(self._raw, self.message.draft_spans), classes="body -drafts")
        else:
            if self._reasoning or self._streaming:  # (a finished reply without reasoning gets no block)
                yield ReasoningBlock(self._reasoning, self._title(self._streaming), collapsed=not self._streaming)
            yield ReplyMarkdown(shown(self._initial), self._initial, classes="body", open_links=False)
        yield Static(Content(safe_text(self.footer(self._live))), classes="footer")

    def _title(self, thinking: bool, reasoning: str | None = None) -> str:
        reasoning = self._reasoning if reasoning is None else reasoning
        return reasoning_title(self.message.num_reasoning_tokens, len(reasoning), thinking)

    def footer(self, live: str | None = None) -> str:
        text = footer_text(self.message, live)
        share = drafted_share(self.message.content, self.message.draft_spans) if live is None else ""
        return f"{text}\n{share}" if self.marks_drafts and share else text

    def toggle_reasoning(self) -> bool:
        """Open or close this reply's reasoning block; False: it has none."""
        for block in self.query(ReasoningBlock):
            if block.text:
                block.toggle()
                return True
        return False

    @property
    def has_reasoning(self) -> bool:
        return any(block.text for block in self.query(ReasoningBlock))

    async def show_upto(self, turn: Turn) -> None:
        """Show a streaming reply as far as `turn` got: the reasoning block's text, then only what is new of the
        answer, so only the last Markdown block is re-parsed. Called once per frame at most."""
        if self.marks_drafts:
            if len(turn.text) > self.num_chars_shown:
                for body in self.query(".-drafts"):
                    self.num_chars_shown = len(turn.text)
                    body.update(marked_reply(turn.text, self.message.draft_spans))
            return
        for block in self.query(ReasoningBlock):
            block.show(turn.reasoning, self._title(turn.splitter.inside, turn.reasoning))
        text = turn.content
        if len(text) <= self.num_chars_shown:
            return
        found = self.query(Markdown)
        if not found:  # (not composed yet)
            return
        new, self.num_chars_shown = text[self.num_chars_shown :], len(text)
        found.first().reply_text = text  # (what a code block's copy reads)
        if len(found.first().source) < fmt.MAX_SHOWN_CHARS:
            await found.first().append(safe_text(new))

    def set_live(self, live: str) -> None:
        for footer in self.query(".footer"):  # (none while the view is still being composed)
            footer.update(Content(live))

    async def finish(self) -> None:
        """The reply is final (self.message updated): show all of it and its metrics line; its reasoning
        block collapses."""
        self.set_class(self.message.status != "done", "-cut")
        bodies, footers = list(self.query(".body")), list(self.query(".footer"))
        reasoning, content = split_reasoning(self.message.content, True if self.message.reasoning_open else None)
        if not bodies or not footers:  # not composed yet: compose() will show the final message
            self._raw, self._reasoning, self._initial, self._live = self.message.content, reasoning, content, None
            self._streaming = False
            return
        for block in self.query(ReasoningBlock):
            block.show(reasoning, self._title(False, reasoning))
            block.collapsed = True
        body = bodies[0]
        if isinstance(body, Markdown):
            body.reply_text = content
            if body.source != shown(content):
                await body.update(shown(content))
        else:
            body.update(marked_reply(self.message.content, self.message.draft_spans))
        footers[0].update(Content(safe_text(self.footer())))


class Transcript(VerticalScroll):
    """Follows the stream (anchored to the bottom) until the user scrolls up."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.session: ChatSession | None = None

    async def show(self, session: ChatSession | None) -> None:
        self.session = session
        with self.app.batch_update():
            await self.remove_children()
            origin = session.conversation.origin if session is not None else None
            widgets: list = [Static(self._origin(session), classes="origin")] if origin is not None else []
            if (session is None or not session.conversation.messages) and origin is None:
                widgets.append(Static(Content(WELCOME), classes="welcome"))
            else:
                turn = session.turn
                for m in session.conversation.messages:
                    if m.role == "user":
                        widgets.append(UserMessage(m))
                    elif turn is not None and m is turn.reply:
                        widgets.append(AssistantMessage(m, turn, live=live_text(session)))
                    else:
                        widgets.append(AssistantMessage(m))
            await self.mount_all(widgets)
        self.anchor()

    @staticmethod
    def _origin(session: ChatSession) -> Content:
        """How this chat continued a full one (a line above its messages, never sent to the model)."""
        return Content(origin_block(session.conversation.origin, session.settings.system_prompt))

    def show_origin(self, session: ChatSession) -> None:
        """Repaint the origin line (its first turn was measured)."""
        if session is self.session and session.conversation.origin is not None:
            for line in self.query(".origin"):
                line.update(self._origin(session))

    async def add_turn(self, session: ChatSession) -> AssistantMessage:
        turn = session.turn
        assert turn is not None and session is self.session
        await self.query(".welcome").remove()
        reply = AssistantMessage(turn.reply, turn, live=live_text(session))
        await self.mount_all([UserMessage(turn.user), reply])
        self.anchor()
        return reply

    def reply_view(self, message: Message) -> AssistantMessage | None:
        for view in self.query(AssistantMessage):
            if view.message is message:
                return view
        return None

    def toggle_reasoning(self, focused: object) -> bool:
        """Open or close the focused reply's reasoning block, or else the last one's; False: no reply here has
        reasoning."""
        views = [v for v in self.query(AssistantMessage) if v.has_reasoning]
        view = focused if focused in views else views[-1] if views else None
        return view is not None and view.toggle_reasoning()

    def focus_message(self, message_id: int) -> bool:
        """Scroll to the message with this store id and focus it (the view stops following the bottom)."""
        view = next((v for v in self.query(MessageView) if v.message.message_id == message_id), None)
        if view is None:
            return False
        self.release_anchor()
        view.focus(scroll_visible=False)
        self.call_after_refresh(self.scroll_to_widget, view, top=True, animate=False)
        return True

    async def remove_message(self, message: Message) -> None:
        for view in self.query(MessageView):
            if view.message is message:
                await view.remove()


def live_text(session: ChatSession) -> str:
    turn = session.turn
    if turn is None:
        return ""
    if turn.cancelled:
        return "stopping…"
    if turn.queued:
        return "waiting for the engine (queue + prefill)…"
    return f"streaming · {turn.num_output_tokens:,} tokens · Esc stops"
