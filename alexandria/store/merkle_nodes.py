"""The log's stored perfect Merkle nodes and its size, read inside any transaction.

The admission transaction writes each leaf's new perfect nodes (``store/admission.py``);
the tree heads, proofs and checkpoints of ``reads/log.py``, the writer's memory and the offline
replay all read them through :func:`node_reader`, which ``core/merkle.py``'s pure functions take
as their ``GetNode``.  A copy of the log (``migrate``, a backup) is checked against the leaves
themselves instead, with :func:`log_root`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from alexandria.core import merkle
from alexandria.errors import Failed

T = TypeVar("T")
#: positions read by one statement (SQLite's default limit of host parameters is 32,766)
NODES_PER_STATEMENT = 500


class LogCorrupt(Failed):
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


def read_together(conn: sqlite3.Connection, compute: Callable[[merkle.GetNode], T]) -> T:
    """``compute(get)`` — a root, an inclusion or a consistency proof of ``core/merkle.py`` —
    with every node it reads fetched by one statement, not one statement each: on PostgreSQL
    each statement is a round trip to the server, and a proof reads up to 2 log2(size) nodes.
    Which nodes those functions read depends on the sizes and indexes alone, never on a hash's
    value, so a first pass with placeholder hashes names them all."""
    wanted: list[int] = []

    def record(level: int, idx: int) -> bytes:
        wanted.append(merkle.position(level, idx))
        return bytes(merkle.HASH_SIZE)

    compute(record)
    found: dict[int, bytes] = {}
    positions = sorted(set(wanted))
    for i in range(0, len(positions), NODES_PER_STATEMENT):
        chunk = positions[i:i + NODES_PER_STATEMENT]
        marks = ",".join("?" * len(chunk))
        found.update((int(r[0]), bytes(r[1])) for r in conn.execute(
            f"SELECT position, hash FROM merkle_nodes WHERE position IN ({marks})", chunk))

    def get(level: int, idx: int) -> bytes:
        found_hash = found.get(merkle.position(level, idx))
        if found_hash is None:
            raise LogCorrupt(f"merkle node ({level}, {idx}) is missing", level=level, index=idx)
        return found_hash

    return compute(get)


def tree_size(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT max(sequence) FROM log").fetchone()
    return int(row[0] or 0)

