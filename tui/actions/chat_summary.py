"""The full chat's summary option, run (issue 27 item 5; priced in tui/text/full_chat.py): the chat's prompt with a
fixed instruction as its last user turn goes to the backend like any turn (submit -> events; the backend renders it
with the one prompt builder, so the chat's cached ids are reused), as conversation -N so that chat N's own prefix
chain stays its own. The summary streams into a modal (tui/screens/summary_progress.py); the stop key cancels it.

When it finishes, a new chat begins with the summary as its system prompt: background the model reads before every
turn, not a message anyone said, so the turns keep alternating user/assistant as every template wants (a template
without a system role gets it folded into the first user turn, core/text/system_role.py), and a later trim keeps
it (the system prompt's blocks stay cached). The chat's own system prompt, if it had one, comes first. The waiting
message goes into the new chat's input box. Cancelled, failed or empty: nothing is created, one notice; the full
chat is never changed."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ...core.api.params import SamplingParams
from ...core.api.protocol import ChatPrompt
from ...core.chats.conversation import Conversation
from ...core.chats.origin import ChatOrigin
from ...core.text.reasoning import split_reasoning
from ..session import ChatSession
from ..text.full_chat import Choice, summary_messages

if TYPE_CHECKING:
    from ...core.api.events import Finished
    from ...core.api.protocol import Handle
    from ..app import LlmChatApp
    from ..bridge import StreamItem
    from ..screens.summary_progress import SummaryProgressScreen


@dataclass(slots=True)
class SummaryRun:
    """The one summary in flight (its modal keeps the user in it until it ends)."""

    session: ChatSession  # the full chat
    choice: Choice
    text: str  # the message waiting for the new chat
    handle: "Handle"
    screen: "SummaryProgressScreen"
    parts: list[str] = field(default_factory=list)
    num_tokens: int = 0
    reasoning_open: bool = False  # the prompt opened `<think>`: the reply begins inside reasoning
    cancelled: bool = False

    def show(self) -> None:
        self.screen.show("".join(self.parts), self.num_tokens, self.choice.max_summary_tokens, self.cancelled)


def summary_system_prompt(chat: Conversation, summary: str) -> str:
    own = f"{chat.settings.system_prompt}\n\n" if chat.settings.system_prompt else ""
    return f"{own}Summary of chat #{chat.chat_id} ({chat.title}), which this chat continues:\n{summary}"


def start_summary(app: "LlmChatApp", session: ChatSession, choice: Choice, text: str) -> None:
    """Submit the summary request and open its progress modal."""
    from ..screens.summary_progress import SummaryProgressScreen

    chat = session.conversation
    prompt = ChatPrompt(tuple(summary_messages(chat)), tuple(chat.token_ids))
    params = SamplingParams(temperature=0.0, max_tokens=choice.max_summary_tokens, stop=chat.settings.stop)
    try:
        handle = app.bridge.service.submit(-chat.chat_id, prompt, params)
    except (RuntimeError, AttributeError) as e:  # shut down (or unloaded) meanwhile
        app.notify(f"The summary could not start ({e}); nothing changed.", severity="error", markup=False)
        return
    screen = SummaryProgressScreen(f"The model writes a summary of #{chat.chat_id} (≤{choice.max_summary_tokens:,} "
                                   "tokens); a new chat starts from it")
    app.summary_run = SummaryRun(session, choice, text, handle, screen)
    app.push_screen(screen)


def cancel_summary(app: "LlmChatApp") -> bool:
    """The stop key while a summary is written: cancel it (its Finished follows). False: none in flight."""
    run = app.summary_run
    if run is None or run.cancelled:
        return run is not None
    run.cancelled = True
    app.bridge.cancel(run.handle)
    run.show()
    return True


async def apply_summary_events(app: "LlmChatApp", items: list["StreamItem"]) -> None:
    """Take the summary's events out of a drained batch (TurnManager skips them: no turn has its handle)."""
    from ...core.api.events import Finished, Started, TextDelta

    run = app.summary_run
    if run is None:
        return
    for item in items:
        if item.handle is not run.handle:
            continue
        event = item.event
        if isinstance(event, Started):
            run.reasoning_open = event.reasoning_open
        elif isinstance(event, TextDelta):
            run.parts.append(event.text)
            run.num_tokens += len(event.token_ids) or 1
        elif isinstance(event, Finished):
            app.summary_run = None
            run.screen.dismiss()
            await finish_summary(app, run, event)
            return
    run.show()


async def finish_summary(app: "LlmChatApp", run: SummaryRun, finished: "Finished") -> None:
    from .full_chat import open_new_chat, store_new_chat

    chat = run.session.conversation
    summary = split_reasoning(finished.text, run.reasoning_open or None)[1].strip()
    if finished.reason.value not in ("stop", "length") or not summary:
        why = ("was cancelled" if finished.reason.value == "abort" else f"failed ({finished.error})" if finished.error
               else "came back empty")
        app.notify(f"The summary {why}: nothing was created; #{chat.chat_id} and your message are as they were.",
                   severity="warning", timeout=8, markup=False)
        return
    origin = ChatOrigin(chat.chat_id, "summary", 0, run.choice.num_prefill_tokens, run.choice.seconds,
                        summary=finished.metrics)
    new = Conversation(0, f"{chat.title} (from a summary)", False,
                       settings=replace(chat.settings, system_prompt=summary_system_prompt(chat, summary)),
                       model_id=chat.model_id, origin=origin)
    session = await store_new_chat(app, chat, new, "the chat continued from a summary")
    if session is not None:
        await open_new_chat(app, session, run.choice, run.text)
