"""A conversation (messages with their exact token spans, settings, title rule), the SQLite store, search,
import/export."""
