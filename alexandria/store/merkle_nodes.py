"""The log's stored perfect Merkle nodes and its size, read inside any transaction.

The admission transaction writes each leaf's new perfect nodes (``store/ledger_storage.py``);
the tree heads, proofs and checkpoints of ``reads/log.py``, the writer's memory and the offline
replay all read them through :func:`node_reader`, which ``core/merkle.py``'s pure functions take
as their ``GetNode``.  A copy of the log (``migrate``, a backup) is checked against the leaves
themselves instead, with :func:`log_root`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from alexandria.core import merkle
from alexandria.errors import ServiceError


class LogCorrupt(ServiceError):
    """Stored leaves or nodes disagree with a persisted checkpoint: the server refuses to sign."""

    default_code = "LOG_CORRUPT"


#: every leaf of the log, in order: the rows :func:`log_root` takes
LEAVES = "SELECT leaf FROM log ORDER BY sequence"


def log_root(rows: Iterable[Sequence[Any]]) -> tuple[int, bytes]:
    """The size and RFC 6962 root of the leaves in ``rows`` (those of :data:`LEAVES`),
    recomputed from the leaves themselves, whatever the stored nodes say.  One leaf at a time
    through ``merkle.TreeBuilder``: memory stays at a few hashes however long the log, as long
    as ``rows`` streams too (a ``sqlite3`` cursor; psycopg's ``Cursor.stream``, never a
    client-side cursor, which holds the whole result)."""
    tree = merkle.TreeBuilder()
    for (leaf,) in rows:
        tree.append_data(bytes(leaf))
    return tree.size, tree.root()


def node_reader(conn: sqlite3.Connection) -> merkle.GetNode:
    """``get(level, index)`` over the stored perfect nodes."""

    def get(level: int, idx: int) -> bytes:
        row = conn.execute(
            "SELECT hash FROM merkle_nodes WHERE position = ?", (merkle.position(level, idx),)
        ).fetchone()
        if row is None:
            raise LogCorrupt(f"merkle node ({level}, {idx}) is missing", level=level, index=idx)
        return bytes(row[0])

    return get


def tree_size(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT max(sequence) FROM log").fetchone()
    return int(row[0] or 0)

