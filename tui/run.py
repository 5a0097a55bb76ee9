"""`llmchat` with no subcommand: the app on a data dir, with the embedded engine or a remote backend."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.chats.store import ChatsFileDamaged, DataDirInUse, default_data_dir
from .app import LlmChatApp


def run_app(args: argparse.Namespace, ask_move_aside=None) -> int:
    """`llmchat`: the app on args.data_dir (default: the user data dir), the engine as the flags ask
    (--model, --device, --kv-cache-gb, --no-prefix-cache). A chats file SQLite cannot read: the user is asked
    whether to move it aside first (tui/screens/damaged_file.py); no: one line, exit 2, the file untouched."""
    from .bridge import DEFAULT_MAX_NUM_SEQS
    from .commands.cli import engine_config
    from .screens.damaged_file import offer_move_aside, refusal

    config = engine_config(args, max_num_seqs=DEFAULT_MAX_NUM_SEQS)  # ValueError: a bad flag, said in one line
    data_dir = Path(args.data_dir).expanduser() if getattr(args, "data_dir", None) else default_data_dir()
    factory = None
    if getattr(args, "backend", None):  # a remote OpenAI-compatible server instead of the embedded engine
        from .bridge import remote_engine_factory

        factory = remote_engine_factory(args.backend, args.api_key, getattr(args, "model", None))

    def make_app() -> LlmChatApp:
        return LlmChatApp(data_dir, factory, model=getattr(args, "model", None), engine_config=config,
                          user_config=getattr(args, "user_config", None),
                          config_problem=getattr(args, "config_problem", None))

    try:
        try:
            app = make_app()
        except ChatsFileDamaged as damage:
            moved = offer_move_aside(damage, ask_move_aside)
            if moved is None:
                print(refusal(damage), file=sys.stderr)
                return 2
            print(f"llmchat: moved the damaged {damage.path.name} to {moved}; starting with no chats",
                  file=sys.stderr)
            app = make_app()
    except DataDirInUse as e:
        print(f"llmchat: {e}", file=sys.stderr)
        return 2
    app.typeahead = not getattr(args, "no_typeahead", False)
    app.run()
    return app.return_code or 0
