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
_VALUES = re.compile(r"^(\s*INSERT INTO\s+(\w+)\s*\([\w\s,]+\)\s*VALUES\s*)"
                     r"(\((?:\s*%s\s*,)*\s*%s\s*\))\s*$", re.IGNORECASE)
#: statements that touch only the tables they name (not ``COMMIT``, ``SAVEPOINT``, …)
_DML = re.compile(r"^\s*(?:SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)
#: a change of one table (``_DML`` and no subquery: then the only table it touches, with
#: those its foreign keys check)
_CHANGE = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)
#: the schema's foreign keys, table → the tables it references (``schema.sql``; a test
#: compares with ``pg_constraint``)
FOREIGN_KEYS: dict[str, tuple[str, ...]] = {"checkpoint_cosignatures": ("checkpoints",)}


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
    """The translated statements of one storage, and what ``PgConnection.pipelined`` needs to
    know of each (bounded)."""

    def __init__(self) -> None:
        self._statements: Bounded[str, str] = Bounded(STATEMENTS)
        self._touched: Bounded[str, frozenset[str] | None] = Bounded(STATEMENTS)
        self._many: Bounded[tuple[str, int, int], str] = Bounded(STATEMENTS)

    def statement(self, sql: str) -> str:
        found = self._statements.get(sql)
        if found is None:
            found = self._statements[sql] = translate(sql)
        return found

    def many_rows(self, head: str, width: int, rows: int) -> str:
        """``head`` (``INSERT INTO t(…) VALUES``) and ``rows`` rows of ``width`` numbered
        parameters (``($1, $2), ($3, $4)``): psycopg's ``RawCursor`` sends it as it is,
        where a long ``%s`` text would be parsed again, in Python, at every execution."""
        key = (head, width, rows)
        found = self._many.get(key)
        if found is None:
            found = self._many[key] = head + ", ".join(
                "(" + ", ".join(f"${i * width + j}" for j in range(1, width + 1)) + ")"
                for i in range(rows))
        return found

    def touched(self, translated: str) -> frozenset[str] | None:
        """A superset of the tables a statement reads or changes: the one table of an
        ``INSERT``, ``UPDATE`` or ``DELETE`` without a subquery (with the tables a foreign key
        links it to), else every word of a statement that touches only the tables it names;
        None for any other statement (``COMMIT``, ``SAVEPOINT``, …: it may touch any)."""
        if translated in self._touched:
            return self._touched[translated]
        found: frozenset[str] | None = None
        if _DML.match(translated):
            found = frozenset(re.findall(r"\w+", translated.lower()))
            change = _CHANGE.match(translated)
            if change is not None and "select" not in found:
                table = change.group(1).lower()
                found = frozenset((table, *FOREIGN_KEYS.get(table, ()), *(
                    other for other, refs in FOREIGN_KEYS.items() if table in refs)))
        self._touched[translated] = found
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
    """Adapt a new connection (also the pool's ``configure`` hook).  JIT compilation is off:
    every statement here is a short index read or write whose answer is due in milliseconds,
    and PostgreSQL (``jit = on`` by default since 15) compiles a plan whose estimated cost
    passes ``jit_above_cost`` — a search of a common word in a large library — for tens of
    milliseconds before running it."""
    raw.adapters.register_dumper(int, _UntypedInt)
    raw.adapters.register_loader("numeric", _Numeric)
    raw.execute("SET jit = off")


#: seconds a new connection may take (libpq's ``connect_timeout``; a URL's own wins): a
#: database host that does not answer holds the writer no longer than this per attempt
CONNECT_TIMEOUT_S = 10


def connect(url: str, *, read_only: bool = False) -> psycopg.Connection[Any]:
    """A configured autocommit connection (transactions are begun explicitly, as with sqlite3
    ``isolation_level=None``)."""
    options: dict[str, Any] = ({} if "connect_timeout" in url
                               else {"connect_timeout": CONNECT_TIMEOUT_S})
    raw = psycopg.connect(url, autocommit=True, application_name="alexandria", **options)
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


class _NoRows:
    """The answer to a statement that returns no rows and was not sent yet (an insert deferred
    by ``PgConnection.pipelined``)."""

    rowcount = -1

    def fetchone(self) -> Any:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter(())


_NO_ROWS = _NoRows()


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
        #: inside ``pipelined``: the rows of plain inserts not sent yet, by statement:
        #: (``INSERT INTO t(…) VALUES``, parameters per row, ``t``, rows)
        self._deferred: dict[str, tuple[str, int, str, list[Sequence[Any]]]] | None = None

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """psycopg's pipeline mode for the statements run inside: each is sent without
        waiting for the previous one's answer, and a round trip is paid only where a result
        is read (``_Cursor``) and at the end, so a write transaction's inserts and updates
        cost one round trip together instead of one each.  An error of a statement whose
        result nobody read is raised at the next read or when the block ends (psycopg's
        ``Pipeline`` exit); the caller then rolls back.

        Inside, the rows of a plain ``INSERT INTO t(…) VALUES (?, …)`` are also held back
        and sent together, as one multi-row ``INSERT`` per statement (``_flush``), before the
        first statement that names ``t`` (a read or change of it), before any statement that
        is not a plain ``SELECT``/``INSERT``/``UPDATE``/``DELETE`` (``COMMIT``,
        ``SAVEPOINT``, …), and when the block ends: what every statement sees is exactly what
        it would see had each insert been sent at once, and a batch of admissions sends one
        statement per table instead of one per admission and table.  An insert's error is
        then raised by a later statement of the same transaction, as the pipeline's are."""
        self.pipeline_failed = False
        with self.raw.pipeline() as pipeline:
            self._pipeline = pipeline
            self._deferred = {}
            try:
                yield
                self._flush()
            finally:
                self._pipeline = None
                self._deferred = None

    def _defer(self, translated: str, rows: Sequence[Sequence[Any]]) -> bool:
        """Hold ``rows`` back if ``translated`` is a plain insert (inside ``pipelined``);
        else send what was held back that the statement could see."""
        deferred = self._deferred
        if deferred is None:
            return False
        entry = deferred.get(translated)
        if entry is None:
            values = _VALUES.match(translated)
            if values is None:
                if deferred:
                    touched = self._dialect.touched(translated)
                    if touched is None or any(t in touched for _, _, t, _ in deferred.values()):
                        self._flush()
                return False
            entry = deferred[translated] = (values.group(1), values.group(3).count("%s"),
                                            values.group(2).lower(), [])
        entry[3].extend(rows)
        return True

    def _flush(self) -> None:
        """Send the held-back rows: one multi-row ``INSERT`` per statement (and ``MANY_ROWS``),
        in the order the statements were first held back."""
        deferred = self._deferred
        if not deferred:
            return
        self._deferred = {}
        try:
            for head, width, _, rows in deferred.values():
                self._insert_many(head, width, rows)
        except psycopg.Error as exc:
            self.pipeline_failed = True
            raise _as_sqlite_error(exc) from exc

    def _insert_many(self, head: str, width: int, rows: Sequence[Sequence[Any]]) -> None:
        """``rows`` as multi-row inserts of at most ``MANY_ROWS`` rows each."""
        for i in range(0, len(rows), MANY_ROWS):
            chunk = rows[i:i + MANY_ROWS]
            # texts vary with the number of rows: never prepared
            psycopg.RawCursor(self.raw).execute(
                self._dialect.many_rows(head, width, len(chunk)),
                [value for row in chunk for value in row], prepare=False)

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = (),
                prepare: bool | None = None) -> _Cursor | _NoRows:
        """``prepare``: psycopg's (``False``: planned for its parameters each time, for a
        statement whose best plan depends on them)."""
        translated = self._dialect.statement(sql)
        if not isinstance(params, dict) and self._defer(translated, (params,)):
            return _NO_ROWS
        try:
            return _Cursor(self.raw.execute(translated, params, prepare=prepare),
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
        if self._defer(translated, rows):
            return
        try:
            values = _VALUES.match(translated) if len(rows) > 1 else None
            if values is None:
                with self.raw.cursor() as cur:
                    cur.executemany(translated, rows)
                return
            self._insert_many(values.group(1), values.group(3).count("%s"), rows)
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
