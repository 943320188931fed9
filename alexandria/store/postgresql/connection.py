"""A psycopg 3 connection that speaks the read models' dialect.

The read models and the admission code are written once against the part of
``sqlite3.Connection`` both backends provide.  ``PgConnection`` gives PostgreSQL that part:

- parameters: ``?`` and ``:name`` become psycopg's ``%s`` and ``%(name)s`` (a literal ``%``
  is doubled); Python integers are sent untyped, so PostgreSQL infers each parameter's type
  from its place in the statement as SQLite accepts any (``substr(leaf, 23, ?)``,
  ``LIMIT ?``);
- SQLite's planner hints (``INDEXED BY name``, ``NOT INDEXED``) are dropped: PostgreSQL plans
  from its statistics; ``INSERT OR IGNORE`` becomes ``ON CONFLICT DO NOTHING``;
- a bare ``BEGIN`` (a read model's snapshot, e.g. ``reads/changes``) is a ``REPEATABLE READ``
  transaction: one snapshot for every statement, as in SQLite;
- integral ``numeric`` values (``sum`` of a ``bigint``) come back as ``int``, as in SQLite;
- errors are raised as ``sqlite3.IntegrityError`` / ``sqlite3.OperationalError`` (the
  driver's error as ``__cause__``), so the group-commit writer handles both backends' failures
  in one place.

Statements are translated once each; ``Dialect`` keeps a bounded table of them, shared by a
storage's connections.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Buffer, Dumper, Loader

from alexandria.core.cache import Bounded
from alexandria.store.postgresql import DIALECT

STATEMENTS = 4096  # distinct SQL texts a storage translates and remembers
MANY_ROWS = 1000  # rows of one multi-row INSERT (``executemany``), far below 65,535 parameters

_TOKENS = re.compile(r"'(?:[^']|'')*'|\?|(?<![:\w]):([A-Za-z_]\w*)|%")
_HINTS = re.compile(r"\s+(?:INDEXED BY \w+|NOT INDEXED)\b")
_OR_IGNORE = re.compile(r"^\s*INSERT OR IGNORE INTO", re.IGNORECASE)
#: a translated plain ``INSERT INTO t(…) VALUES (%s, …)``: nothing after its one row of
#: parameters (no ``ON CONFLICT``: a multi-row upsert may not touch one row twice)
_VALUES = re.compile(r"^(\s*INSERT INTO\s+\w+\s*\([\w\s,]+\)\s*VALUES\s*)"
                     r"(\((?:\s*%s\s*,)*\s*%s\s*\))\s*$", re.IGNORECASE)


def translate(sql: str) -> str:
    """``sql`` as written for sqlite3, as psycopg takes it (see the module docstring)."""
    if sql.strip().upper() == "BEGIN":
        return "BEGIN ISOLATION LEVEL REPEATABLE READ"
    sql = _HINTS.sub("", sql)
    ignore = _OR_IGNORE.match(sql) is not None
    if ignore:
        sql = _OR_IGNORE.sub("INSERT INTO", sql, count=1)

    def token(m: re.Match[str]) -> str:
        text = m.group(0)
        if text.startswith("'"):
            return text.replace("%", "%%")
        if text == "?":
            return "%s"
        if text == "%":
            return "%%"
        return f"%({m.group(1)})s"

    sql = _TOKENS.sub(token, sql)
    return sql + " ON CONFLICT DO NOTHING" if ignore else sql


class Dialect:
    """The translated statements of one storage (bounded)."""

    def __init__(self) -> None:
        self._statements: Bounded[str, str] = Bounded(STATEMENTS)

    def statement(self, sql: str) -> str:
        found = self._statements.get(sql)
        if found is None:
            found = self._statements[sql] = translate(sql)
        return found


class _UntypedInt(Dumper):
    """A Python ``int`` as a parameter of unknown type: PostgreSQL infers it from context."""

    oid = 0

    def dump(self, obj: Any) -> Buffer:
        return str(int(obj)).encode()


class _Numeric(Loader):
    """``numeric`` results: ``int`` when integral (``sum(bigint)``), else ``Decimal``."""

    def load(self, data: Buffer) -> Any:
        text = bytes(data).decode()
        return int(text) if text.lstrip("-").isdigit() else Decimal(text)


def configure(raw: psycopg.Connection[Any]) -> None:
    """Adapt a new connection (also the pool's ``configure`` hook)."""
    raw.adapters.register_dumper(int, _UntypedInt)
    raw.adapters.register_loader("numeric", _Numeric)


def connect(url: str, *, read_only: bool = False) -> psycopg.Connection[Any]:
    """A configured autocommit connection (transactions are begun explicitly, as with sqlite3
    ``isolation_level=None``)."""
    raw = psycopg.connect(url, autocommit=True, application_name="alexandria")
    configure(raw)
    if read_only:
        raw.execute("SET default_transaction_read_only = on")
    return raw


class _Cursor:
    """The rows of one statement, as a ``sqlite3.Cursor`` offers them.  In pipeline mode
    (``PgConnection.pipelined``) the statement's result is waited for only when it is asked
    for: the first look at it syncs the pipeline (one round trip for every statement queued
    before it)."""

    def __init__(self, cur: psycopg.Cursor[Any], owner: PgConnection | None) -> None:
        self._cur = cur
        self._owner = owner  # while its pipeline runs

    def _ready(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None and owner._pipeline is not None and self._cur.pgresult is None:
            try:
                owner._pipeline.sync()
            except psycopg.Error as exc:
                owner.pipeline_failed = True
                raise _as_sqlite_error(exc) from exc

    def fetchone(self) -> Any:
        self._ready()
        return self._cur.fetchone() if self._cur.description is not None else None

    def fetchall(self) -> list[Any]:
        self._ready()
        return self._cur.fetchall() if self._cur.description is not None else []

    def __iter__(self) -> Iterator[Any]:
        self._ready()
        if self._cur.description is None:
            return iter(())
        return iter(self._cur)

    @property
    def rowcount(self) -> int:
        self._ready()
        return self._cur.rowcount


def _as_sqlite_error(exc: psycopg.Error) -> sqlite3.Error:
    if isinstance(exc, psycopg.IntegrityError):
        return sqlite3.IntegrityError(str(exc))
    return sqlite3.OperationalError(str(exc))


class PgConnection:
    """The connection protocol of ``reads/`` and the store over one psycopg connection."""

    dialect = DIALECT

    def __init__(self, raw: psycopg.Connection[Any], dialect: Dialect) -> None:
        self.raw = raw
        self._dialect = dialect
        self._pipeline: psycopg.Pipeline | None = None
        #: a statement failed inside the pipeline: the transaction is aborted, whatever a
        #: caller did with the error (a ``COMMIT`` would quietly roll it back)
        self.pipeline_failed = False

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """psycopg's pipeline mode for the statements run inside: each is sent without
        waiting for the previous one's answer, and a round trip is paid only where a result
        is read (``_Cursor``) and at the end, so a write transaction's inserts and updates
        cost one round trip together instead of one each.  An error of a statement whose
        result nobody read is raised at the next read or when the block ends (psycopg's
        ``Pipeline`` exit); the caller then rolls back."""
        self.pipeline_failed = False
        with self.raw.pipeline() as pipeline:
            self._pipeline = pipeline
            try:
                yield
            finally:
                self._pipeline = None

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = (),
                prepare: bool | None = None) -> _Cursor:
        """``prepare``: psycopg's (``False``: planned for its parameters each time, for a
        statement whose best plan depends on them)."""
        try:
            return _Cursor(self.raw.execute(self._dialect.statement(sql), params,
                                            prepare=prepare),
                           self if self._pipeline is not None else None)
        except psycopg.Error as exc:
            if self._pipeline is not None:
                self.pipeline_failed = True
            raise _as_sqlite_error(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """A plain ``INSERT … VALUES (?, …)`` is sent as one statement of many rows (at most
        ``MANY_ROWS`` each): the server runs one statement instead of one per row, and psycopg
        pays its per-statement cost once.  Any other statement runs once per row."""
        rows = list(rows)
        if not rows:
            return
        translated = self._dialect.statement(sql)
        try:
            values = _VALUES.match(translated) if len(rows) > 1 else None
            if values is None:
                with self.raw.cursor() as cur:
                    cur.executemany(translated, rows)
                return
            for i in range(0, len(rows), MANY_ROWS):
                chunk = rows[i:i + MANY_ROWS]
                self.raw.execute(
                    values.group(1) + ", ".join([values.group(2)] * len(chunk)),
                    [value for row in chunk for value in row],
                )
        except psycopg.Error as exc:
            if self._pipeline is not None:
                self.pipeline_failed = True
            raise _as_sqlite_error(exc) from exc

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    @property
    def broken(self) -> bool:
        return self.raw.closed or self.raw.broken

    def close(self) -> None:
        self.raw.close()
