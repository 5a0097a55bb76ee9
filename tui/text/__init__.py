"""Pure text helpers for the UI: number formats, cache texts, draft marks, code blocks, sampling fields, keys."""
