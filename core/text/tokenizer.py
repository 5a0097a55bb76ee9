"""Tokenizer (Hugging Face `tokenizers` plus the model's chat template) and the incremental detokenizer.

`Tokenizer.from_dir` reads a model folder (a converted GGUF looks like one from the Hub, see
`gguf_tokenizer`); the chat template is compiled and rendered by `chat_template`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from .chat_template import (ChatTemplateError, compile_chat_template, pick_template, plain_data,
                                        render_chat_template)
from .system_role import render_with_system_role

_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>")


def _token_text(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value  # older configs store AddedToken dicts


class Tokenizer:
    """A Hugging Face `tokenizers` tokenizer plus the model's chat template and special token ids."""

    def __init__(self, backend: HFTokenizer, config: dict[str, Any], chat_template: str | None) -> None:
        self._backend = backend
        self._config = config
        self.chat_template = chat_template
        self._template = compile_chat_template(chat_template) if chat_template is not None else None
        added = backend.get_added_tokens_decoder()
        self.special_token_ids: frozenset[int] = frozenset(i for i, tok in added.items() if tok.special)
        self.special_strings: tuple[str, ...] = tuple(sorted({added[i].content for i in self.special_token_ids}))
        self._plain_backend: HFTokenizer | None = None  # the backend with special-token matching off, on first use
        self.special_tokens: dict[str, str] = {
            name: text for name in ("bos_token", "eos_token", "unk_token", "pad_token")
            if (text := _token_text(config.get(name))) is not None
        }
        self.bos_token_id = self._id_of(self.special_tokens.get("bos_token"))
        self.eos_token_id = self._id_of(self.special_tokens.get("eos_token"))
        if "add_bos_token" in config:
            self.add_bos_token = bool(config["add_bos_token"]) and self.bos_token_id is not None
        else:  # no flag (e.g. Llama 3 folders): BOS is added iff the post-processor adds it
            with_special = backend.encode("a", add_special_tokens=True).ids
            self.add_bos_token = self.bos_token_id is not None and with_special[:1] == [self.bos_token_id] and (
                len(with_special) > len(backend.encode("a", add_special_tokens=False).ids))
        stops = {self.eos_token_id} | {self._id_of(t) for t in _END_OF_TURN_TOKENS}
        self.stop_token_ids: frozenset[int] = frozenset(i for i in stops if i is not None)

    @classmethod
    def from_dir(cls, folder: Path) -> "Tokenizer":
        """Read tokenizer.json, tokenizer_config.json and (if present) chat_template.jinja of a model folder."""
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing; llmchat needs a model folder with a tokenizer.json "
                                    "(the fast Hugging Face tokenizer) or a GGUF file")
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        template = pick_template(config.get("chat_template"))
        jinja_path = folder / "chat_template.jinja"
        if jinja_path.is_file():
            template = jinja_path.read_text(encoding="utf-8")
        return cls(HFTokenizer.from_file(str(path)), config, template)

    @classmethod
    def from_files(cls, files: dict[str, str]) -> "Tokenizer":
        """The same from the files' text (a GGUF's tokenizer, built in memory: weights/gguf_tokenizer.py)."""
        config = json.loads(files["tokenizer_config.json"]) if "tokenizer_config.json" in files else {}
        template = files.get("chat_template.jinja") or pick_template(config.get("chat_template"))
        return cls(HFTokenizer.from_str(files["tokenizer.json"]), config, template)

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self._backend.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def vocab(self) -> dict[str, int]:
        """Every token (added ones included) and its id."""
        return self._backend.get_vocab(with_added_tokens=True)

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(token_id)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`; special-token strings in it become their ids. BOS iff `add_bos` (default: config)."""
        ids = self._backend.encode(text, add_special_tokens=False).ids
        if self.add_bos_token if add_bos is None else add_bos:
            assert self.bos_token_id is not None, "add_bos needs a bos_token"
            ids.insert(0, self.bos_token_id)
        return ids

    def encode_plain(self, text: str) -> list[int]:
        """Token ids of `text` as plain text: a special-token string in it is encoded as its characters (the
        way any other text is), never as the special id. No BOS."""
        if self._plain_backend is None:
            self._plain_backend = HFTokenizer.from_str(self._backend.to_str())
            self._plain_backend.encode_special_tokens = True
        return self._plain_backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True,
                            **kwargs: Any) -> str:
        """The prompt text for `messages` ([{"role", "content"}, ...]), rendered by the model's own template."""
        if self._template is None:
            raise ChatTemplateError("this model has no chat template (tokenizer_config.json 'chat_template' or "
                             "chat_template.jinja); use a chat/instruct model or add its template")
        if not messages:
            raise ChatTemplateError("cannot render a chat template for an empty conversation; add at least one message")
        variables = {**self.special_tokens, **plain_data(kwargs)}
        plain_messages = [{k: v for k, v in plain_data(m).items() if v is not None} for m in messages]
        template = self._template
        variables.update(tools=None, documents=None, add_generation_prompt=add_generation_prompt)
        return render_with_system_role(lambda ms: render_chat_template(template, dict(variables, messages=ms)),
                                       plain_messages)


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas that never split a UTF-8 character.

    vLLM's scheme: decode the window ids[prefix_offset:] and compare with the text of ids[prefix_offset:
    read_offset] that was already emitted; a window ending in U+FFFD waits for the bytes that complete it.
    The window stays a few tokens long, so each push costs O(1) in the length of the sequence.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip_ids = tokenizer.special_token_ids if skip_special_tokens else frozenset()
        self._ids: list[int] = []  # the window: ids not yet fully behind the emitted text
        self._read_offset = 0  # ids[:read_offset] are emitted; ids[:read_offset] decodes to complete characters

    def push(self, token_id: int) -> str:
        """Add one token; return the text that is now complete ('' while a character is unfinished)."""
        if token_id in self._skip_ids:
            return ""
        self._ids.append(token_id)
        prefix_text = self._tokenizer.decode(self._ids[: self._read_offset])
        new_text = self._tokenizer.decode(self._ids)
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""
        assert new_text.startswith(prefix_text), "byte-level decoding of a window must extend its prefix"
        del self._ids[: self._read_offset]  # the old prefix is no longer needed as context
        self._read_offset = len(self._ids)
        return new_text[len(prefix_text):]

    def flush(self) -> str:
        """The text still held back at the end of the stream (invalid bytes come out as U+FFFD, like decode)."""
        prefix_text = self._tokenizer.decode(self._ids[: self._read_offset])
        new_text = self._tokenizer.decode(self._ids)
        self._ids.clear()
        self._read_offset = 0
        return new_text[len(prefix_text):]
