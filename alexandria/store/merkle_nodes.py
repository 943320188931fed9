"""The log's stored perfect Merkle nodes and its size, read inside any transaction.

The admission transaction writes each leaf's new perfect nodes (``store/sqlite.py``); the
tree heads, proofs and checkpoints of ``reads/log.py``, the writer's memory and the offline
replay all read them through :func:`node_reader`, which ``core/merkle.py``'s pure functions take
as their ``GetNode``.
"""

from __future__ import annotations

import sqlite3

from alexandria.core import merkle
from alexandria.errors import ServiceError


class LogCorrupt(ServiceError):
    """Stored leaves or nodes disagree with a persisted checkpoint: the server refuses to sign."""

    default_code = "LOG_CORRUPT"



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

