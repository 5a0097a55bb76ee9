"""Every action a user can name, in one table: its default keys, its footer label, its palette entry and its
line on the cache-facts screen (F1). The app's and the input box's BINDINGS, the command palette and the F1
screen are all read from here, so a new action is one row, and a key the config file's [keys] moves is shown
moved everywhere (tui/text/key_bindings.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True, slots=True)
class UserAction:
    action: str  # the app's action, as Textual runs it: "new_chat", "switch(1)"
    id: str  # the binding id the config file's [keys] names ("previous_chat" for "switch(-1)")
    title: str  # its name in the command palette
    help: str  # the palette's help line, without its key
    keys: str = ""  # default keys; "" (palette only)
    label: str = ""  # the footer's short label; "" keeps it out of the footer
    also: str = ""  # another way to reach it, after its key: "or e on a message"
    cache_line: str = ""  # its line on the F1 screen's cache operations ("" : not listed there)
    priority: bool = False
    in_app: bool = True  # the app binds its keys
    in_prompt: bool = False  # the input box binds them too (over a TextArea key of its own)
    palette: bool = True


def _a(action: str, title: str, help: str, keys: str = "", **kw) -> UserAction:
    ids = {"switch(-1)": "previous_chat", "switch(1)": "next_chat"}
    return UserAction(action, ids.get(action, action), title, help, keys, **kw)


ACTIONS: tuple[UserAction, ...] = (
    _a("new_chat", "New chat", "start a new chat", "ctrl+n", label="New chat"),
    _a("stop", "Stop the reply", "stop the current chat's reply; the text so far is kept", "escape", label="Stop reply"),
    _a("rename", "Rename chat", "give the current chat a title", "ctrl+r", label="Rename"),
    _a("delete", "Delete chat", "delete the current chat, after a confirmation", "ctrl+d", label="Delete",
       priority=True),
    _a("settings", "Chat settings", "system prompt, temperature, top-p, top-k, seed, stop strings, max tokens",
       "ctrl+o", label="Settings"),
    _a("export", "Export chat", "write the chat as Markdown and JSON under the data dir", "ctrl+s", label="Export"),
    _a("import_chat", "Import chat", "add a chat from a file that Export or `llmchat export` wrote (JSON or Markdown)"),
    _a("search_chats", "Search chats", "find messages in every chat; pick one to open its chat there", "ctrl+f"),
    _a("copy_reply", "Copy last reply", "copy the current chat's last reply to the clipboard", "ctrl+l",
       label="Copy reply"),
    _a("toggle_theme", "Toggle light/dark theme", "switch between the light and the dark theme", "ctrl+t",
       label="Theme"),
    _a("toggle_reasoning", "Toggle reasoning", "open or close the reasoning block (<think>) of the focused reply, "
                                               "else of the last reply that has one", "alt+r", label="Reasoning",
       also="or r on a reply", in_prompt=True),
    _a("toggle_panels", "Toggle panels", "show or hide the engine panels", "ctrl+b"),
    _a("switch(-1)", "Previous chat", "open the previous chat in the list", "ctrl+up,alt+up"),
    _a("switch(1)", "Next chat", "open the next chat in the list", "ctrl+down,alt+down"),
    _a("switch_model", "Switch model", "unload this model and load another: the default, one used before, or any "
                                       "`llmchat models` lists (size and memory needed shown)"),
    _a("compose_in_editor", "Compose in editor", "edit the draft in $VISUAL/$EDITOR; it comes back to the input box",
       "ctrl+e", in_app=False, in_prompt=True),
    # cache operations (tui/actions/cache_ops.py), listed on the F1 screen too
    _a("regenerate", "Regenerate reply", "answer the last message again; its prompt is fully cached", "ctrl+g",
       cache_line="regenerate the last reply: its prompt is the very same ids, every full block is a hit"),
    _a("edit_last", "Edit and resend", "edit a message and resend it; the old branch is kept as a fork", "f2",
       also="or e on a message", cache_line="(or e) edit a message and resend: the chat is cut there (ids before "
                                            "it kept), the old branch becomes a fork"),
    _a("fork_last", "Fork chat", "copy this chat up to a message into a new chat sharing its KV", "f3",
       also="or f on a message", cache_line="(or f) fork the chat at a message into a new chat that shares its "
                                            "blocks"),
    _a("undo_turn", "Undo last turn", "remove the last message and its reply; the text returns to the input", "f4",
       cache_line="undo the last turn (its message returns to the input box)"),
    _a("explain_last", "Why this reuse", "where the last reply's prefix reuse ended and why", "f9",
       also="or w on a reply", cache_line="(or w) why the last reply reused what it did (the line under each "
                                          "reply says it in short)"),
    _a("verify_cache", "Verify cache", "re-run the last turn greedily with and without the prefix cache and "
                                       "compare the tokens", "f5",
       cache_line="verify cache: re-run the last turn greedily with and without the prefix cache, compare the "
                  "tokens"),
    _a("toggle_drafts", "Mark accepted drafts", "show replies as plain text with the drafted tokens the model kept "
                                                "underlined (speculative decoding)", "f6", in_prompt=True,
       cache_line="mark accepted drafts: underline the text that speculative decoding drafted and the model kept"),
    _a("toggle_pin", "Pin chat", "keep this chat's KV blocks out of LRU eviction (within the pin budget); again "
                                 "to unpin", "f7", in_prompt=True, cache_line="pin the chat: its blocks stay cached while others "
                                                              "are evicted (again: back to the LRU)"),
    _a("context_map", "Context map", "each message's share of the context, where its blocks are, what a trim "
                                     "would drop", "f10", cache_line="the context map of this chat"),
    _a("block_map", "Block map", "every KV block: used, cached, free, shared, LRU order", "f8",
       cache_line="the block map"),
    _a("cache_help", "Cache facts (misconceptions)", "what the cache and the engine do, with this machine's "
                                                     "numbers, and the cache keys", "f1", cache_line="this screen"),
)


def _binding(a: UserAction, action: str) -> Binding:
    return Binding(a.keys, action, a.label or a.title, show=bool(a.label), priority=a.priority, id=a.id)


def app_bindings() -> list[Binding]:
    """The app's BINDINGS: every action with a default key that the app binds."""
    return [_binding(a, a.action) for a in ACTIONS if a.keys and a.in_app]


def prompt_bindings() -> list[Binding]:
    """The input box's BINDINGS: the app's actions it binds over the text area's own keys."""
    return [_binding(a, "app." + a.action) for a in ACTIONS if a.in_prompt]


def stop_binding() -> Binding:
    """The stop key for a modal that shows something in flight (a summary being written): the app's own bindings do
    not reach past a modal; this one carries the same id, so the config file's [keys] moves it too."""
    return next(_binding(a, "app." + a.action) for a in ACTIONS if a.action == "stop")


def key_label(keys: str) -> str:
    """The first of a binding's keys as the screen names it: "ctrl+g,x" -> "Ctrl+G"; "" -> "" (palette only)."""
    first = keys.split(",")[0]
    return "+".join(part[:1].upper() + part[1:] for part in first.split("+")) if first else ""


def palette_help(a: UserAction, keys_now: dict[str, str]) -> str:
    """The palette's help line, naming the key the action has now (`keys_now`: binding id -> its keys)."""
    ways = [w for w in (key_label(keys_now.get(a.id, a.keys)), a.also) if w]
    return f"{a.help} ({', '.join(ways)})" if ways else a.help


def cache_lines() -> list[tuple[str, str]]:
    """(binding id, its line) for the F1 screen's cache operations, in table order."""
    return [(a.id, a.cache_line) for a in ACTIONS if a.cache_line]
