"""Which storage a ``--db`` names: a libpq URL (``postgresql://…``, ``postgres://…``) is a
PostgreSQL database, anything else a SQLite file."""

from __future__ import annotations

from pathlib import Path

from alexandria.core.trust import Genesis
from alexandria.store.postgresql import is_database_url
from alexandria.store.sqlite import SqliteStorage


def storage_for(db: str | Path, genesis: Genesis) -> SqliteStorage:
    """The storage of the library in ``db`` (not yet opened).  PostgreSQL's driver is
    imported only when a URL asks for it."""
    if is_database_url(db):
        from alexandria.store.postgresql.storage import PostgresStorage

        return PostgresStorage(str(db), genesis)
    return SqliteStorage(db, genesis)
