"""Tokenizer (Hugging Face `tokenizers`), chat template (sandboxed Jinja) and incremental detokenizer.

A GGUF carries no tokenizer.json: `tokenizer_files_from_gguf` rebuilds the Hugging Face files from the
llama.cpp metadata (vocabulary, merges, token types, pre-tokenizer name), so a converted model folder
looks like one downloaded from the Hub and `Tokenizer.from_dir` reads either kind.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

# --------------------------------------------------------------------------- GGUF -> tokenizer.json

_GGUF_CONTROL = 3  # llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
_GGUF_USER_DEFINED = 4

# Llama 3 (llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3) and Qwen2 split patterns, as in their tokenizer.json files.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _pre_tokenizer_for(pre: str) -> tuple[Any, Any | None, bool]:
    """(pre_tokenizer, normalizer, ignore_merges) for a llama.cpp `tokenizer.ggml.pre` name."""
    gpt2_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in ("gpt2", "gpt-2", "default"):
        return gpt2_regex, None, False
    if pre in ("smollm", "starcoder", "refact"):  # digits one by one, then the GPT-2 regex (SmolLM2's tokenizer.json)
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2_regex]), None, False
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)
    if pre in ("llama-bpe", "llama3", "llama-v3"):
        split = pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False)
        return pre_tokenizers.Sequence([split, byte_level]), None, True
    if pre == "qwen2":
        split = pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False)
        return pre_tokenizers.Sequence([split, byte_level]), normalizers.NFC(), False
    raise ValueError(
        f"unsupported tokenizer pre-tokenizer {pre!r} in the GGUF (tokenizer.ggml.pre); llmchat supports "
        "smollm, starcoder, refact, gpt2/default, llama-bpe, qwen2. Use the model's Hugging Face folder "
        "(with tokenizer.json) instead."
    )


def _gguf_value(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def tokenizer_files_from_gguf(reader: Any) -> dict[str, str]:
    """`{"tokenizer.json": ..., "tokenizer_config.json": ...}` rebuilt from a GGUF's tokenizer metadata.

    `reader` is a `gguf.GGUFReader`. Only byte-level BPE (`tokenizer.ggml.model == "gpt2"`) is supported.
    """
    kind = _gguf_value(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"unsupported tokenizer {kind!r} in the GGUF (tokenizer.ggml.model); llmchat reads byte-level BPE "
            "('gpt2') vocabularies only. Use the model's Hugging Face folder (with tokenizer.json) instead."
        )
    tokens: list[str] = _gguf_value(reader, "tokenizer.ggml.tokens")
    token_types: list[int] = _gguf_value(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    merges: list[str] = _gguf_value(reader, "tokenizer.ggml.merges") or []
    pre = _gguf_value(reader, "tokenizer.ggml.pre", "default")
    pre_tokenizer, normalizer, ignore_merges = _pre_tokenizer_for(pre)

    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)  # a repeated spelling keeps its first id, as llama.cpp's text->id map does
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=merge_pairs, ignore_merges=ignore_merges, fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.decoder = decoders.ByteLevel()

    def whole(token_type: int) -> list[AddedToken]:  # added tokens keep their vocabulary id (first spelling only)
        return [
            AddedToken(tok, special=token_type == _GGUF_CONTROL, normalized=False)
            for i, (tok, kind_) in enumerate(zip(tokens, token_types))
            if kind_ == token_type and vocab[tok] == i
        ]

    backend.add_special_tokens(whole(_GGUF_CONTROL))
    backend.add_tokens(whole(_GGUF_USER_DEFINED))
    assert backend.get_vocab_size(with_added_tokens=True) == len(vocab), "added tokens must reuse vocabulary ids"

    def token_at(key: str) -> str | None:
        index = _gguf_value(reader, f"tokenizer.ggml.{key}")
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    bos, add_bos = token_at("bos_token_id"), bool(_gguf_value(reader, "tokenizer.ggml.add_bos_token", False))
    if add_bos and bos is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
    else:
        backend.post_processor = processors.ByteLevel(trim_offsets=False)

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": bool(_gguf_value(reader, "tokenizer.ggml.add_eos_token", False)),
        "bos_token": bos,
        "eos_token": token_at("eos_token_id"),
        "unk_token": token_at("unknown_token_id"),
        "pad_token": token_at("padding_token_id"),
        "additional_special_tokens": [t.content for t in whole(_GGUF_CONTROL)],
        "clean_up_tokenization_spaces": False,
        "chat_template": _gguf_chat_template(reader),
    }
    return {
        "tokenizer.json": backend.to_str(pretty=False),
        "tokenizer_config.json": json.dumps(config, ensure_ascii=False, indent=2),
    }


def _gguf_chat_template(reader: Any) -> str | list[dict[str, str]] | None:
    """The default template, or a list of named ones when the file has `tokenizer.chat_template.<name>` too."""
    default = _gguf_value(reader, "tokenizer.chat_template")
    prefix = "tokenizer.chat_template."
    named = [
        {"name": key[len(prefix):], "template": _gguf_value(reader, key)}
        for key in reader.fields
        if key.startswith(prefix) and key != "tokenizer.chat_template.names"
    ]
    if not named:
        return default
    return ([{"name": "default", "template": default}] if default is not None else []) + named


# --------------------------------------------------------------------------- chat template

_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>")


class _TemplateNamespace(jinja2.utils.Namespace):
    """`namespace()` that refuses underscore names, so a template cannot reach Python internals through it."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # same signature trick as jinja2's Namespace
        self, attrs = args[0], dict(*args[1:], **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates may not set {name!r} on a namespace")


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (marks assistant text for training masks): renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a model's chat template in an immutable Jinja sandbox, set up the way transformers does."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, namespace=_TemplateNamespace)
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateError as e:
        raise ValueError(f"the model's chat template is not valid Jinja ({e}); fix the template or the model") from e


def _plain(value: Any) -> Any:
    """Plain JSON data (no caller objects with methods reach the sandbox), as transformers passes it."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return f"<{type(value).__name__}>"


def _pick_template(template: Any) -> str | None:
    if template is None or isinstance(template, str):
        return template
    named = {entry["name"]: entry["template"] for entry in template}  # a list of {"name", "template"}
    return named.get("default", next(iter(named.values()), None))


def _token_text(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value  # older configs store AddedToken dicts


# --------------------------------------------------------------------------- tokenizer


class Tokenizer:
    """A Hugging Face `tokenizers` tokenizer plus the model's chat template and special token ids."""

    def __init__(self, backend: HFTokenizer, config: dict[str, Any], chat_template: str | None) -> None:
        self._backend = backend
        self._config = config
        self.chat_template = chat_template
        self._template = compile_chat_template(chat_template) if chat_template is not None else None
        added = backend.get_added_tokens_decoder()
        self.special_token_ids: frozenset[int] = frozenset(i for i, tok in added.items() if tok.special)
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
        template = _pick_template(config.get("chat_template"))
        jinja_path = folder / "chat_template.jinja"
        if jinja_path.is_file():
            template = jinja_path.read_text(encoding="utf-8")
        return cls(HFTokenizer.from_file(str(path)), config, template)

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self._backend.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(token_id)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`; special-token strings in it become their ids. BOS iff `add_bos` (default: config)."""
        ids = self._backend.encode(text, add_special_tokens=False).ids
        if self.add_bos_token if add_bos is None else add_bos:
            assert self.bos_token_id is not None, "add_bos needs a bos_token"
            ids.insert(0, self.bos_token_id)
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True,
                            **kwargs: Any) -> str:
        """The prompt text for `messages` ([{"role", "content"}, ...]), rendered by the model's own template."""
        if self._template is None:
            raise ValueError("this model has no chat template (tokenizer_config.json 'chat_template' or "
                             "chat_template.jinja); use a chat/instruct model or add its template")
        if not messages:
            raise ValueError("cannot render a chat template for an empty conversation; add at least one message")
        variables = {**self.special_tokens, **_plain(kwargs)}
        try:
            plain_messages = [{k: v for k, v in _plain(m).items() if v is not None} for m in messages]
            return self._template.render(messages=plain_messages, tools=None, documents=None,
                                         add_generation_prompt=add_generation_prompt, **variables)
        except jinja2.exceptions.TemplateError as e:  # includes SecurityError and the template's raise_exception
            raise ValueError(f"the chat template refused this conversation: {e}") from e

    def encode_chat(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of the rendered chat; like transformers, no BOS is added beyond what the template writes."""
        return self.encode(self.apply_chat_template(messages, add_generation_prompt), add_bos=False)


# --------------------------------------------------------------------------- incremental detokenizer


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
