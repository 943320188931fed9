"""The SQL of the read models (``reads/``) where the two backends differ, owned here so that
``reads/`` is written once, against either connection:

- SQLite's planner hints (``indexed_by``, ``not_indexed``): its planner would rather probe each
  row by its key, a page of its own read cold, than the small covering index that answers a
  page; PostgreSQL plans from its statistics and has no hints;
- ``asks_together``: on PostgreSQL each statement is a round trip to the server, so a read
  model asks a page's lookups with one statement, where SQLite asks them one by one
  in-process (its pages read ahead);
- ``member_sequences``: the members of a root's feed in a range, as each planner reads it best;
- ``posting_hits``, ``relevance_page``: PostgreSQL's full-text index
  (``store/postgresql/postings.py``); SQLite's are the FTS5 tables of ``store/search_index.py``.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from alexandria.store.postgresql import is_postgresql, postings


def indexed_by(conn: sqlite3.Connection, index: str) -> str:
    """`` INDEXED BY index`` on SQLite, nothing on PostgreSQL (to follow a table's name)."""
    return "" if is_postgresql(conn) else f" INDEXED BY {index}"


def not_indexed(conn: sqlite3.Connection) -> str:
    """`` NOT INDEXED`` on SQLite (a scan in rowid order), nothing on PostgreSQL."""
    return "" if is_postgresql(conn) else " NOT INDEXED"


def asks_together(conn: sqlite3.Connection) -> bool:
    """Whether each statement on ``conn`` is a round trip to a server: a page's lookups are
    then asked by one statement."""
    return is_postgresql(conn)


#: The items of a root in ``(:after, :hi]``, the first ``:n`` in admission order: the
#: object's first revision (its objects key, ``:owner``), its later revisions
#: (``revisions_later``) and every revision of every member below it (``feed`` and
#: ``feed_recent``, by the owner's key), four ordered index ranges that SQLite merges,
#: stopping at the limit.  Portable: the deep pages of ``reads/changes`` use it on both.
MEMBER_SEQUENCES = (
    "SELECT created_sequence AS s FROM objects"
    " WHERE created_sequence = :owner AND created_sequence > :after AND created_sequence <= :hi"
    " UNION ALL SELECT sequence FROM revisions"
    " WHERE root = :root AND id != root AND sequence > :after AND sequence <= :hi"
    " UNION ALL SELECT sequence FROM feed"
    " WHERE owner = :owner AND sequence > :after AND sequence <= :hi"
    " UNION ALL SELECT sequence FROM feed_recent"
    " WHERE owner = :owner AND sequence > :after AND sequence <= :hi"
    " ORDER BY s LIMIT :n"
)


# PostgreSQL does not merge the ranges: it reads every one of them whole and sorts them, a
# cost that grows with the root's members whatever the page.  With each arm ordered and cut
# at the limit it merges at most 4 × limit rows (its ``feed_recent`` is empty: feed.py).
_MEMBER_SEQUENCES_PG = (
    "(SELECT created_sequence AS s FROM objects"
    " WHERE created_sequence = :owner AND created_sequence > :after AND created_sequence <= :hi)"
    " UNION ALL (SELECT sequence FROM revisions"
    " WHERE root = :root AND id != root AND sequence > :after AND sequence <= :hi"
    " ORDER BY sequence LIMIT :n)"
    " UNION ALL (SELECT sequence FROM feed"
    " WHERE owner = :owner AND sequence > :after AND sequence <= :hi ORDER BY sequence LIMIT :n)"
    " UNION ALL (SELECT sequence FROM feed_recent"
    " WHERE owner = :owner AND sequence > :after AND sequence <= :hi ORDER BY sequence LIMIT :n)"
    " ORDER BY s LIMIT :n"
)


def member_sequences(conn: sqlite3.Connection) -> str:
    """``MEMBER_SEQUENCES`` as ``conn``'s planner reads it best."""
    return _MEMBER_SEQUENCES_PG if is_postgresql(conn) else MEMBER_SEQUENCES


def posting_hits(conn: sqlite3.Connection, words: list[str]) -> tuple[Any, ...] | None:
    """On PostgreSQL, the ``h(seq, score)`` CTE of the heads holding every one of ``words``
    and its parameters (``postings.hits``); None on SQLite, whose FTS5 tables the catalogue
    reads itself."""
    return postings.hits(words) if is_postgresql(conn) else None


def relevance_page(
    conn: sqlite3.Connection, word: str, offset: int, limit: int
) -> tuple[list[int], int] | None:
    """On PostgreSQL, the heads holding ``word`` best first, a page, and how many hold it
    (``postings.relevance_page``); None on SQLite, whose FTS5 levels the catalogue reads
    itself."""
    return postings.relevance_page(conn, word, offset, limit) if is_postgresql(conn) else None
