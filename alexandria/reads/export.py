"""``alexandria export --db``: the export of a database (the format: ``audit/export.py``,
docs/log.md), read a bounded window at a time; the export of a running server
(``audit/export.iter_server``) gives the same bytes for the same log."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import orjson

from alexandria.core.log_wire import PAGE_CHECKPOINTS, checkpoint_line, entry_bytes, header_line
from alexandria.errors import Failed
from alexandria.reads import log
from alexandria.store.backends import display, open_readonly
from alexandria.store.merkle_nodes import tree_size
from alexandria.store.schema import check_leaf_format

_DB_WINDOW = 1000


def iter_db(path: str | Path) -> Iterator[bytes]:
    """The export of the database at ``path`` (a SQLite file or a PostgreSQL URL, opened
    read-only; a server may keep writing): every leaf admitted when the export starts and every
    checkpoint up to that size."""
    with open_readonly(path) as conn:
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'genesis'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise Failed(f"{display(path)} is not an Alexandria database",
                         "NOT_A_LIBRARY") from exc
        if row is None:
            raise Failed(f"{display(path)} is not an Alexandria database",
                         "NOT_A_LIBRARY")
        check_leaf_format(conn, display(path))
        size = tree_size(conn)
        yield header_line(orjson.loads(row[0]), size)
        checkpoints = _db_checkpoints(conn, size)
        pending = next(checkpoints, None)
        done = 0
        while done < size:
            rows = conn.execute(
                "SELECT sequence, type, leaf FROM log WHERE sequence > ?"
                " AND sequence <= ? ORDER BY sequence LIMIT ?",
                (done, size, _DB_WINDOW),
            ).fetchall()
            if not rows:
                raise Failed(f"leaf {done + 1} is missing", "LOG_CORRUPT")
            for seq, kind, leaf in rows:
                yield entry_bytes(seq, kind, bytes(leaf)) + b"\n"
                while pending is not None and pending.size == seq:
                    yield checkpoint_line(pending.note)
                    pending = next(checkpoints, None)
                done = seq


def _db_checkpoints(conn: sqlite3.Connection, upto: int) -> Iterator[log.StoredCheckpoint]:
    after = 0
    while True:
        page = log.checkpoints_after(conn, after, upto, cosigned=True)
        yield from page
        if len(page) < PAGE_CHECKPOINTS:
            return
        after = page[-1].size
