"""The PostgreSQL backend: several stateless ``alexandria serve`` nodes on one database.

``storage`` (``PostgresBackend``), ``connection`` (the connection protocol the read models use,
over psycopg 3), ``schema`` (``schema.sql`` beside it, applied when a node starts),
``postings`` (the catalogue's full-text index), ``migrate`` (a SQLite library copied in).

The read models in ``reads/`` are written once, against the subset of ``sqlite3.Connection``
both backends provide (``execute``/``executemany`` with ``?`` or ``:name`` parameters,
``fetchone``/``fetchall``/iteration, ``in_transaction``); what differs — full-text search,
planner hints — sits behind ``is_postgresql``.  This module imports no driver, so the read
models can ask which backend a connection belongs to without loading psycopg.
"""

from __future__ import annotations

from typing import Any

DIALECT = "postgresql"
SCHEMES = ("postgresql://", "postgres://")


def is_postgresql(conn: Any) -> bool:
    """Whether ``conn`` is a PostgreSQL connection (``connection.PgConnection``)."""
    return getattr(conn, "dialect", None) == DIALECT


def is_database_url(db: object) -> bool:
    """Whether ``--db`` names a PostgreSQL database (a libpq URL) rather than a SQLite file."""
    return isinstance(db, str) and db.startswith(SCHEMES)
