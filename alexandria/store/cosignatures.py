"""Witness cosignatures of the log's checkpoints: the ``checkpoint_cosignatures`` table.

Each row is one verified ``cosignature/v1`` line by one witness (its vkey) on one checkpoint;
a served note is the stored checkpoint note followed by these lines, in witness order, so the
same checkpoint reads the same everywhere (``/api/log/checkpoint``, ``/api/log/checkpoints``,
the export).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence


def store(conn: sqlite3.Connection, size: int, witness: str, line: str) -> None:
    """Keep ``witness``'s newest cosignature line of checkpoint ``size``."""
    conn.execute(
        "INSERT INTO checkpoint_cosignatures(size, witness, line) VALUES (?, ?, ?)"
        " ON CONFLICT(size, witness) DO UPDATE SET line = excluded.line",
        (size, witness, line),
    )


def lines(conn: sqlite3.Connection, size: int) -> str:
    """The cosignature lines of checkpoint ``size``, concatenated."""
    return "".join(r[0] for r in conn.execute(
        "SELECT line FROM checkpoint_cosignatures WHERE size = ? ORDER BY witness", (size,)))


def lines_between(conn: sqlite3.Connection, after: int, upto: int) -> dict[int, str]:
    """Cosignature lines of the checkpoints with ``after < size <= upto``, by size."""
    out: dict[int, str] = {}
    for size, line in conn.execute(
        "SELECT size, line FROM checkpoint_cosignatures WHERE size > ? AND size <= ?"
        " ORDER BY size, witness", (after, upto),
    ):
        out[size] = out.get(size, "") + line
    return out


def last_cosigned(conn: sqlite3.Connection, witness: str) -> int:
    """The largest checkpoint size ``witness`` cosigned (0 if none)."""
    row = conn.execute(
        "SELECT max(size) FROM checkpoint_cosignatures WHERE witness = ?", (witness,)
    ).fetchone()
    return int(row[0] or 0)


def latest_with_quorum(conn: sqlite3.Connection, witnesses: Sequence[str], quorum: int) -> int:
    """The largest checkpoint size cosigned by at least ``quorum`` of ``witnesses`` (0 if
    none).  Walks the primary key from the newest size down and stops at the first match."""
    if quorum <= 0:
        return 0
    marks = ", ".join("?" * len(witnesses))
    row = conn.execute(
        f"SELECT size FROM checkpoint_cosignatures WHERE witness IN ({marks})"
        " GROUP BY size HAVING count(*) >= ? ORDER BY size DESC LIMIT 1",
        (*witnesses, quorum),
    ).fetchone()
    return 0 if row is None else int(row[0])
