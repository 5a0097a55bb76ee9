"""Pick the model to switch to: the default model, recently used --model names, the cache dir's models and the
other stores' (HF cache, Ollama, LM Studio), each with its size and memory needed against free; "won't fit" marked."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from ...core.weights.catalog import ModelChoice
from ...core.text.sanitize import safe_text

_WHERE = {"default": "default", "recent": "used before", "cache": "in the cache dir", "llmchat": "llmchat's cache",
          "huggingface": "HF cache", "ollama": "Ollama", "lmstudio": "LM Studio"}


class ModelPickerScreen(ModalScreen[ModelChoice | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, choices: list[ModelChoice], loaded: str | None) -> None:
        super().__init__(classes="dialog-screen")
        self.choices = choices
        self.loaded = loaded  # the --model of the model loaded now (None: the default model)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label(Content("Switch model"), classes="dialog-title")
            options = []
            for i, c in enumerate(self.choices):
                now = " · loaded now" if c.model == self.loaded else ""
                detail = f"  {safe_text(c.detail)}" if c.detail else ""
                text = Content(f"{safe_text(c.label)}  ({_WHERE.get(c.where, c.where)}{now}){detail}")
                options.append(Option(text if c.fits else text.stylize("dim"), id=str(i)))
            yield OptionList(*options, id="models")
            yield Static(Content("Enter loads it (the current model is unloaded first) · Esc cancels. Chats keep "
                                 "their token ids; a chat of another model is marked, and its next turn is "
                                 "tokenized afresh for the loaded one."), classes="hint")

    def on_mount(self) -> None:
        options = self.query_one("#models", OptionList)
        options.focus()
        options.highlighted = next((i for i, c in enumerate(self.choices) if c.model == self.loaded), 0)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.choices[int(event.option.id)])
