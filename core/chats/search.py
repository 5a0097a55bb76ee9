"""Search across chats: an SQLite FTS5 index over message text, or a LIKE scan where FTS5 is missing.

The index is an external-content FTS5 table over `messages.content`, kept in step by triggers on
`messages`: every insert, content update and delete (a chat's delete too, through ON DELETE CASCADE)
changes the index in the statement that changes the message, so in the same transaction. It is not part
of the numbered schema: `ensure_index` runs at every writable open and builds it (FTS5 'rebuild') for a
database that lacks it or was last written without it, so older files get a filled index on open. Where
this Python's sqlite3 has no FTS5, the triggers are dropped, the file is marked as not indexed (the next
open with FTS5 rebuilds it), and search falls back to a slower, unranked LIKE scan.

User text is never FTS5 syntax: each whitespace-separated term becomes a quoted prefix phrase
("term"*), all of them required, so quotes, parentheses, AND/OR/NEAR are searched as text.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass

FTS_TABLE = "messages_fts"
INDEX_KEY = "search_index"  # meta key: 'fts5' while the triggers keep the index in step
MATCH_START, MATCH_END = "\x02", "\x03"  # snippet() markers around a matched term (split out below)
SNIPPET_NUM_TOKENS = 16  # words of context in a snippet
LIKE_CONTEXT_CHARS = 40  # characters of context either side of a LIKE match

NO_FTS5_LINE = "This SQLite has no FTS5: search scans message text (slower, unranked)."

_TRIGGERS = ("messages_fts_insert", "messages_fts_delete", "messages_fts_update")
_INDEX_SCHEMA = [
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
    " content, content='messages', content_rowid='message_id', tokenize='unicode61 remove_diacritics 2')",
    f"CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN"
    f" INSERT INTO {FTS_TABLE} (rowid, content) VALUES (new.message_id, new.content); END",
    f"CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN"
    f" INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, content) VALUES ('delete', old.message_id, old.content); END",
    f"CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE OF content ON messages"
    f" WHEN old.content IS NOT new.content BEGIN"
    f" INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, content) VALUES ('delete', old.message_id, old.content);"
    f" INSERT INTO {FTS_TABLE} (rowid, content) VALUES (new.message_id, new.content); END",
]


class SearchError(ValueError):
    """A query the index could not run; the message is one line for the user."""


@dataclass(slots=True, frozen=True)
class SearchHit:
    chat_id: int
    chat_title: str
    message_id: int
    role: str
    snippet: tuple[tuple[str, bool], ...]  # the matching text with context: (text, is_match) parts


def fts5_available(db: sqlite3.Connection) -> bool:
    """Whether this sqlite3 build has the FTS5 module (tried on a throwaway temp table)."""
    try:
        db.execute("CREATE VIRTUAL TABLE temp.llmchat_fts5_probe USING fts5(x)")
        db.execute("DROP TABLE temp.llmchat_fts5_probe")
    except sqlite3.OperationalError:
        return False
    return True


def ensure_index(db: sqlite3.Connection) -> bool:
    """Bring the search index in step with `messages` (inside the caller's transaction); True: FTS5 in use."""
    if not fts5_available(db):
        for name in _TRIGGERS:  # (a file indexed elsewhere: its triggers would fail on every insert here)
            db.execute(f"DROP TRIGGER IF EXISTS {name}")
        db.execute("DELETE FROM meta WHERE key = ?", (INDEX_KEY,))
        return False
    row = db.execute("SELECT value FROM meta WHERE key = ?", (INDEX_KEY,)).fetchone()
    for statement in _INDEX_SCHEMA:
        db.execute(statement)
    if row is None or row[0] != "fts5":  # new, or written meanwhile without the triggers: fill it from messages
        db.execute(f"INSERT INTO {FTS_TABLE} ({FTS_TABLE}) VALUES ('rebuild')")
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, 'fts5')", (INDEX_KEY,))
    return True


def index_in_step(db: sqlite3.Connection) -> bool:
    """For a read-only open: whether the file has an FTS5 index this sqlite3 can read."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key = ?", (INDEX_KEY,)).fetchone()
    except sqlite3.OperationalError:  # (no meta table)
        return False
    return row is not None and row[0] == "fts5" and fts5_available(db)


def query_terms(text: str) -> list[str]:
    return text.split()


def fts_query(terms: list[str]) -> str:
    """FTS5 MATCH text that finds messages holding every term (as a word prefix), whatever the terms hold."""
    return " ".join('"' + term.replace('"', '""') + '"*' for term in terms)


def split_marked(text: str) -> tuple[tuple[str, bool], ...]:
    """snippet() output -> (text, is_match) parts; a marker that the message itself held is dropped."""
    parts: list[tuple[str, bool]] = []
    for i, chunk in enumerate(text.split(MATCH_START)):
        inside, _, after = chunk.partition(MATCH_END) if i else ("", "", chunk)
        parts += [(inside.replace(MATCH_END, ""), True)] if inside else []
        parts += [(after.replace(MATCH_END, ""), False)] if after else []
    return tuple(parts)


def like_snippet(content: str, terms: list[str], context: int = LIKE_CONTEXT_CHARS) -> tuple[tuple[str, bool], ...]:
    """The LIKE fallback's snippet: from `context` characters before the first match to `context` after the
    first match of the last term found (at most 4 * context in all), every match marked."""
    folded = content.casefold()
    found = [(at, at + len(t)) for t in terms if (at := folded.find(t.casefold())) >= 0] or [(0, 0)]
    start = max(0, min(found)[0] - context)
    end = min(len(content), max(e for _, e in found) + context, start + 4 * context)
    window = content[start:end]
    matched = [False] * len(window)
    low = window.casefold()
    if len(low) == len(window):  # (casefold may change lengths, e.g. 'ß' -> 'ss': then nothing is marked)
        for term in (t.casefold() for t in terms):
            at = low.find(term)
            while term and at >= 0:
                matched[at:at + len(term)] = [True] * len(term)
                at = low.find(term, at + 1)
    pieces = [("…" if start > 0 else "", False), *zip(window, matched), ("…" if end < len(content) else "", False)]
    parts: list[tuple[str, bool]] = []
    for text, is_match in pieces:  # runs of the same kind as one part
        if parts and parts[-1][1] == is_match:
            parts[-1] = (parts[-1][0] + text, is_match)
        elif text:
            parts.append((text, is_match))
    return tuple(parts)


def search(db: sqlite3.Connection, text: str, *, use_fts: bool, limit: int = 50) -> list[SearchHit]:
    """Messages of every chat holding every term of `text`: best match first (FTS5) or newest first (LIKE)."""
    terms = query_terms(text)
    if not terms:
        return []
    if use_fts:
        sql = (f"SELECT m.message_id, m.chat_id, c.title, m.role,"
               f" snippet({FTS_TABLE}, 0, char(2), char(3), '…', {SNIPPET_NUM_TOKENS}) AS snip"
               f" FROM {FTS_TABLE} JOIN messages m ON m.message_id = {FTS_TABLE}.rowid"
               f" JOIN chats c ON c.chat_id = m.chat_id"
               f" WHERE {FTS_TABLE} MATCH ? ORDER BY rank, m.message_id DESC LIMIT ?")
        try:
            rows = db.execute(sql, (fts_query(terms), limit)).fetchall()
        except sqlite3.OperationalError as e:  # (quoting makes this unexpected; still one line, not a crash)
            raise SearchError(f"could not search for {text!r}: {e}") from None
        return [SearchHit(r[1], r[2], r[0], r[3], split_marked(r[4])) for r in rows]
    where = " AND ".join(["m.content LIKE ? ESCAPE '\\'"] * len(terms))
    patterns = ["%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for t in terms]
    rows = db.execute(
        "SELECT m.message_id, m.chat_id, c.title, m.role, m.content FROM messages m"
        f" JOIN chats c ON c.chat_id = m.chat_id WHERE {where} ORDER BY m.message_id DESC LIMIT ?",
        (*patterns, limit),
    ).fetchall()
    return [SearchHit(r[1], r[2], r[0], r[3], like_snippet(r[4], terms)) for r in rows]
