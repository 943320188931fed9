"""``alexandria backup`` of a PostgreSQL library: the backup is a SQLite library file.

The project's backup format is a library database a node can serve, ``describe`` and
``export`` with nothing but Alexandria: a SQLite file.  A PostgreSQL library is copied into
one from a single ``REPEATABLE READ`` snapshot (nodes keep admitting meanwhile; the copy holds
exactly what was committed when it began), every table ``migrate`` copies (``COPIED``: the
log, its Merkle nodes, the projections, checkpoints, personal lists, enrolments, ``meta`` with
the genesis and the cursor secret, so cursors stay valid after a restore), streamed through a
stream (libpq's chunked rows) a batch at a time; the catalogue's indexes, which differ between the
backends, are rebuilt from the copied revisions (``search_index.ensure``).  Before the file is
kept, the root of its leaves (recomputed one leaf at a time) must equal the snapshot's log root.

``alexandria restore BACKUP --db postgresql://…`` is ``migrate`` with ``replace``: the same
checks, in one transaction under the write lock.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any, cast

import psycopg

from alexandria.core import merkle
from alexandria.errors import Failed
from alexandria.files import create_private
from alexandria.store import migrations, schema, search_index
from alexandria.store.merkle_nodes import LEAVES, log_root, node_reader, tree_size
from alexandria.store.postgresql import connection
from alexandria.store.postgresql.connection import Dialect, PgConnection
from alexandria.store.postgresql.migrate import BATCH, COPIED, NOT_COPIED_META


class BackupFailed(Failed):
    default_code = "BACKUP_FAILED"


def _columns(lite: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in lite.execute(f"PRAGMA table_info({table})")]


def _copy_table(raw: psycopg.Connection[Any], lite: sqlite3.Connection, table: str) -> int:
    cols = _columns(lite, table)
    where = (" WHERE key NOT IN (" + ",".join(["%s"] * len(NOT_COPIED_META)) + ")"
             if table == "meta" else "")
    insert = (f"INSERT INTO {table}({', '.join(cols)})"
              f" VALUES ({', '.join('?' * len(cols))})")
    count = 0
    rows = raw.cursor().stream(f"SELECT {', '.join(cols)} FROM {table}{where}",
                               NOT_COPIED_META if where else None, size=BATCH)
    while chunk := list(itertools.islice(rows, BATCH)):  # streamed: bounded memory
        lite.executemany(insert, chunk)
        count += len(chunk)
    return count


def to_sqlite(url: str, target: Path, name: str) -> None:
    """One consistent snapshot of the PostgreSQL library at ``url`` into the new SQLite file
    ``target`` (``name``: the database as messages call it)."""
    try:
        raw = connection.connect(url, read_only=True)
    except psycopg.Error as exc:
        raise Failed(f"cannot connect to {name}: {exc}".strip(), "STORAGE_UNAVAILABLE",
                     db=name) from exc
    with raw:
        raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        # the connection protocol is sqlite3's subset (store/postgresql/__init__.py)
        pg = cast(sqlite3.Connection, PgConnection(raw, Dialect()))
        size = tree_size(pg)
        root = merkle.root_hash(size, node_reader(pg))
        create_private(target)
        lite = sqlite3.connect(target, isolation_level=None)
        try:
            lite.execute("PRAGMA page_size = 4096")  # as a new library's (store/sqlite.py)
            migrations.apply(lite, target)  # the layout and version of a new library
            lite.execute("BEGIN")
            for table in COPIED:
                _copy_table(raw, lite, table)
            schema.fill_derived_table(lite, "tree_heads")  # migrate.DERIVED
            search_index.ensure(lite)
            lite.execute("COMMIT")
            copied_size, copied_root = log_root(lite.execute(LEAVES))
            if (copied_size, copied_root) != (size, root):
                raise BackupFailed(
                    f"the copy's {copied_size} leaves have the root {copied_root.hex()}, the"
                    f" database's {size} leaves {root.hex()}", size=size)
        finally:
            lite.close()
        raw.execute("COMMIT")
