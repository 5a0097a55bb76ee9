"""The CLI and its subcommands (ask, serve, bench, cache, import, export, config). No Textual at import."""
