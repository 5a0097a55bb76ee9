"""Small modal dialogs: confirm, ask for one line of text, edit a chat's settings."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static, TextArea

from ...core.chats.conversation import ChatSettings
from ..text.sampling_fields import parse_seed, parse_stop_lines, parse_top_k, stop_lines


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("escape,n", "dismiss(False)", "No"), Binding("y", "dismiss(True)", "Yes")]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Content(self.question), classes="question")
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no").focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class TextPromptScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, label: str, value: str = "") -> None:
        super().__init__(classes="dialog-screen")
        self.label = label
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Content(self.label))
            yield Input(self.value, id="text")
            yield Static(Content("Enter saves · Esc cancels"), classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)


class SettingsScreen(ModalScreen[ChatSettings | None]):
    """A chat's system prompt and sampling settings; a bad value is one line here and nothing changes."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Save")]

    def __init__(self, title: str, settings: ChatSettings) -> None:
        super().__init__(classes="dialog-screen")
        self.chat_title = title
        self.settings = settings

    def compose(self) -> ComposeResult:
        s = self.settings
        with Vertical(classes="dialog -wide"):
            yield Label(Content(f"Settings of {self.chat_title}"), classes="dialog-title")
            yield Label(Content("System prompt (empty: the model's default)"))
            yield TextArea(s.system_prompt or "", id="system", soft_wrap=True, compact=True)
            with Horizontal(classes="fields"):
                with Vertical():
                    yield Label(Content("Temperature (0 = greedy)"))
                    yield Input(f"{s.temperature:g}", id="temperature", type="number")
                with Vertical():
                    yield Label(Content("Top-p (0-1]"))
                    yield Input(f"{s.top_p:g}", id="top_p", type="number")
                with Vertical():
                    yield Label(Content("Max tokens"))
                    yield Input(str(s.max_tokens), id="max_tokens", type="integer")
            with Horizontal(classes="fields"):
                with Vertical():
                    yield Label(Content("Top-k (empty/0: off)"))
                    yield Input(str(s.top_k) if s.top_k else "", id="top_k", type="integer")
                with Vertical():
                    yield Label(Content("Seed (empty: random)"))
                    yield Input("" if s.seed is None else str(s.seed), id="seed", type="integer")
                with Vertical(classes="-stop"):
                    yield Label(Content("Stop (one per line; \\n = newline)"))
                    yield TextArea(stop_lines(s.stop), id="stop", soft_wrap=False, compact=True)
            yield Static(id="settings-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Save (ctrl+s)", variant="primary", id="save")
                yield Button("Cancel (esc)", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)

    def action_save(self) -> None:
        try:
            settings = self.read_settings()
        except ValueError as e:
            self.query_one("#settings-error", Static).update(Content(str(e)))
            return
        self.dismiss(settings)

    def read_settings(self) -> ChatSettings:
        def number(field: str, kind=float):
            raw = self.query_one(f"#{field}", Input).value.strip()
            try:
                return kind(raw)
            except ValueError:
                raise ValueError(f"{field.replace('_', ' ')} must be a number, got {raw!r}") from None

        temperature, top_p, max_tokens = number("temperature"), number("top_p"), number("max_tokens", int)
        if temperature < 0:
            raise ValueError("temperature must be >= 0 (0 = greedy)")
        if not 0 < top_p <= 1:
            raise ValueError("top-p must be in (0, 1]")
        if max_tokens < 1:
            raise ValueError("max tokens must be at least 1")
        system = self.query_one("#system", TextArea).text.strip() or None
        top_k = parse_top_k(self.query_one("#top_k", Input).value)
        seed = parse_seed(self.query_one("#seed", Input).value)
        stop = parse_stop_lines(self.query_one("#stop", TextArea).text)
        settings = ChatSettings(system, temperature, top_p, max_tokens, top_k, seed, stop)
        settings.check()  # NaN, inf, 10**30 max tokens: the record's own check, one line
        return settings
