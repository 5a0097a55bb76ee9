"""`llmchat import FILE`: a chat exported by llmchat (JSON with token ids, or Markdown) back into the store."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...core.chats.exchange import ChatImportError, read_chat_file
from ...core.chats.store import ChatStore, DataDirInUse, default_data_dir
from ...core.text.sanitize import safe_text


def run_import(args: argparse.Namespace) -> int:
    """Check the whole file, then store the chat in one transaction; a bad file is one line and exit 2."""
    path = Path(args.file).expanduser()
    try:
        record = read_chat_file(path)
    except ChatImportError as e:
        print(f"llmchat: {safe_text(str(path))}: {safe_text(str(e))}; nothing imported", file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir).expanduser() if getattr(args, "data_dir", None) else default_data_dir()
    try:
        with ChatStore(data_dir) as store:
            chat = store.import_chat(record)
    except (DataDirInUse, RuntimeError) as e:  # the app has it open; a store from a newer llmchat
        print(f"llmchat: {e}", file=sys.stderr)
        return 2
    kind = f"{len(chat.token_ids):,} token ids" if chat.token_ids else "text only: its next turn re-tokenizes"
    print(f"imported chat #{chat.chat_id} \"{safe_text(chat.title)}\": {len(chat.messages)} messages, {kind}")
    return 0
