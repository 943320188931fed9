"""Which storage a ``--db`` names: a libpq URL (``postgresql://…``, ``postgres://…``) is a
PostgreSQL database, anything else a SQLite file.

``storage_for`` opens it to serve; ``open_readonly`` opens it for the offline commands
(``export --db``, ``backup``, ``restore``, ``mirror``), which read it as a library a server
may be writing to meanwhile.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from alexandria.core.trust import Genesis
from alexandria.errors import Failed, Malformed
from alexandria.store.interface import Storage
from alexandria.store.postgresql import is_database_url
from alexandria.store.sqlite import sqlite_storage


def storage_for(db: str | Path, genesis: Genesis, read_db: str | None = None) -> Storage:
    """The storage of the library in ``db`` (not yet opened), its reads from the streaming
    replica ``read_db`` if given (PostgreSQL only).  PostgreSQL's driver is imported only when
    a URL asks for it."""
    if is_database_url(db):
        from alexandria.store.postgresql.storage import postgres_storage

        if read_db is not None and not is_database_url(read_db):
            raise Malformed(f"--read-db {read_db!r} is not a postgresql:// URL", "USAGE")
        return postgres_storage(str(db), genesis, read_db)
    if read_db is not None:
        raise Malformed("--read-db (a streaming replica for reads) needs --db postgresql://…",
                        "USAGE")
    return sqlite_storage(db, genesis)


def display(db: str | Path) -> str:
    """``db`` as messages name it: a URL without its password."""
    if is_database_url(db):
        from alexandria.store.postgresql.storage import redacted

        return redacted(str(db))
    return str(db)


@contextlib.contextmanager
def open_readonly(db: str | Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the library database ``db`` (each statement sees the latest
    commits, as a SQLite ``mode=ro`` connection outside a transaction does).  A missing SQLite
    file is ``NO_DATABASE``; an unreachable PostgreSQL database ``STORAGE_UNAVAILABLE``."""
    if is_database_url(db):
        import psycopg

        from alexandria.store.postgresql import connection

        try:
            raw = connection.connect(str(db), read_only=True)
        except psycopg.Error as exc:
            raise Failed(f"cannot connect to {display(db)}: {exc}".strip(),
                         "STORAGE_UNAVAILABLE", db=display(db)) from exc
        try:
            # the connection protocol is sqlite3's subset (store/postgresql/__init__.py)
            yield cast(sqlite3.Connection,
                       connection.PgConnection(raw, connection.Dialect()))
        finally:
            raw.close()
        return
    path = Path(db)
    if not path.is_file():
        raise Malformed(f"{path}: no such database", "NO_DATABASE", path=str(path))
    conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


def has_library(db: str | Path) -> bool:
    """Whether ``db`` already holds a library (a genesis recorded): a new mirror or restore
    target does not."""
    if not is_database_url(db) and not Path(db).exists():
        return False
    with open_readonly(db) as conn:
        try:
            row = conn.execute("SELECT 1 FROM meta WHERE key = 'genesis_pin'").fetchone()
        except sqlite3.DatabaseError:  # no meta table: an empty database
            return False
    return row is not None
