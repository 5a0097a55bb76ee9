"""Export a chat as Markdown (for people) or JSON (for programs: exact text, token ids, per-turn metrics).

`llmchat export CHAT_ID` writes one to stdout or a file; without CHAT_ID it lists the chats. The app's
Export action writes both next to the data dir. Markdown goes through safe_text (it is meant to be
read in a terminal or an editor); JSON keeps the exact text, with every control character escaped.
"""
from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
import time
from dataclasses import fields
from pathlib import Path

from ...core.chats.conversation import Conversation
from ...core.chats.corruption import DamagedChat, damage_of
from ...core.chats.private import make_private_dir, write_private_text
from ...core.chats.store import ChatStore, default_data_dir
from ..text import format as fmt
from ...core.text.sanitize import safe_text

_JSON_ESCAPE = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def chat_markdown(record: Conversation) -> str:
    s = record.settings
    out = [
        f"# {safe_text(record.title)}",
        "",
        f"Chat #{record.chat_id} · created {_stamp(record.created_at)} · last active {_stamp(record.updated_at)}  ",
        f"temperature {s.temperature:g} · top-p {s.top_p:g} · max tokens {s.max_tokens:,} · "
        f"{len(record.token_ids):,} tokens in context",
        "",
    ]
    if s.system_prompt:
        out += ["## System", "", safe_text(s.system_prompt), ""]
    for m in record.messages:
        out += [f"## {m.role.capitalize()}", "", safe_text(m.content), ""]
        notes = []
        if m.status != "done":
            notes.append(m.status + (f": {m.error}" if m.error else ""))
        if m.metrics is not None:
            notes.append(fmt.turn_line(m.metrics))
        if notes:
            out += [f"*{safe_text(' · '.join(notes))}*", ""]
    return "\n".join(out)


def _metrics_dict(m) -> dict | None:
    if m is None:
        return None
    values = {f.name: getattr(m, f.name) for f in fields(m)}
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()}


def chat_dict(record: Conversation) -> dict:
    s = record.settings
    return {
        "chat_id": record.chat_id,
        "title": record.title,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "settings": {"system_prompt": s.system_prompt, "temperature": s.temperature, "top_p": s.top_p,
                     "max_tokens": s.max_tokens, "top_k": s.top_k, "seed": s.seed, "stop": list(s.stop)},
        "model_id": record.model_id,
        "token_ids": record.token_ids,
        "messages": [
            {"role": m.role, "content": m.content, "status": m.status, "finish_reason": m.finish_reason,
             "error": m.error, "created_at": m.created_at, "metrics": _metrics_dict(m.metrics),
             "token_span": list(m.token_span) if m.token_span is not None else None}
            for m in record.messages
        ],
    }


def chat_json(record: Conversation) -> str:
    """JSON text; control characters (C0 by json itself, DEL, C1, bidi controls here) are \\u escapes."""
    d = chat_dict(record)
    ids, d["token_ids"] = d["token_ids"], "\0ids"  # thousands of ids: one line, not one per line
    text = json.dumps(d, ensure_ascii=False, indent=2).translate(_JSON_ESCAPE)
    return text.replace('"\\u0000ids"', json.dumps(ids, separators=(",", ":")), 1) + "\n"


def export_chat(record: Conversation, folder: Path) -> tuple[Path, Path]:
    make_private_dir(folder)
    base = folder / f"chat-{record.chat_id}"
    md, js = base.with_suffix(".md"), base.with_suffix(".json")
    write_private_text(md, chat_markdown(record))
    write_private_text(js, chat_json(record))
    return md, js


def chat_table(store: ChatStore) -> str:
    rows = [f"{'id':>5}  {'last active':16}  {'msgs':>4}  title"]
    for c in store.list_chats():
        rows.append(f"{c.chat_id:>5}  {_stamp(c.updated_at):16}  {c.num_messages:>4}  {safe_text(c.title)}")
    return "\n".join(rows)


def run_export(args: argparse.Namespace) -> int:
    """`llmchat export [CHAT_ID] [--format markdown|json] [--output FILE]`; reads the store without locking it."""
    data_dir = Path(args.data_dir).expanduser() if getattr(args, "data_dir", None) else default_data_dir()
    try:
        store = ChatStore(data_dir, readonly=True)
    except (FileNotFoundError, RuntimeError) as e:  # no chats there yet; a newer llmchat's; ChatsFileDamaged
        print(f"llmchat: {e}", file=sys.stderr)
        return 2
    with store:
        try:
            if getattr(args, "chat_id", None) is None:
                print(chat_table(store))
                return 0
            record = store.load_chat(args.chat_id)
        except (LookupError, DamagedChat) as e:
            print(f"llmchat: {e} (`llmchat export` lists them)", file=sys.stderr)
            return 2
        except sqlite3.DatabaseError as e:  # a damaged page met past the file's header
            if (damage := damage_of(e, store.path)) is None:
                raise
            print(f"llmchat: {damage}", file=sys.stderr)
            return 2
    text = chat_json(record) if getattr(args, "format", "markdown") == "json" else chat_markdown(record) + "\n"
    output = getattr(args, "output", None)
    if output and output != "-":
        write_private_text(Path(output), text)  # new: 0600; an existing file keeps the mode its owner gave it
        print(f"wrote chat #{record.chat_id} to {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
