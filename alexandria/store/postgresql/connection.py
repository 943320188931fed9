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
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Buffer, Dumper, Loader
from psycopg.types.numeric import Int8Dumper

from alexandria.core.cache import Bounded
from alexandria.store.postgresql import DIALECT

STATEMENTS = 4096  # distinct SQL texts a storage translates and remembers
#: rows of one multi-row INSERT at most (``_insert_many``), far below 65,535 parameters
MANY_ROWS = 512
#: a multi-row insert of at most this many rows has a statement of its own size, a larger one
#: is cut in powers of two first (``_sizes``): a group of a few admissions sends one statement
#: per table, and each table has at most 21 statement texts, each prepared once
EXACT_ROWS = 16
#: rows of a held-back insert sent together while its transaction goes on (``_defer``): a
#: statement of this many rows goes out as soon as it is held, without waiting for an answer
SEND_ROWS = 64
#: the first chunk of a transaction's statements is ``SEND_ROWS`` halved 0 to
#: ``PHASES`` − 1 times, by the order the statements were first held back in
#: (``PgConnection._chunk_rows``)
PHASES = 4
#: prepared statements a connection keeps (psycopg's ``prepared_max``): every multi-row size
#: of every held-back insert beside the statements run most often
PREPARED = 1024

_TOKENS = re.compile(r"'(?:[^']|'')*'|\?|(?<![:\w]):([A-Za-z_]\w*)|%")
_HINTS = re.compile(r"\s+(?:INDEXED BY \w+|NOT INDEXED)\b")
_OR_IGNORE = re.compile(r"^\s*INSERT OR IGNORE INTO", re.IGNORECASE)
#: a translated ``INSERT INTO t(…) VALUES (…)`` whose rows ``PgConnection.pipelined`` may hold
#: back: one row of parameters and plain literals (``1``, ``'x'``), then nothing, ``ON CONFLICT
#: DO NOTHING``, or an additive upsert ``ON CONFLICT(keys) DO UPDATE SET c = t.c + excluded.c,
#: …`` (rows of one key are then summed into one: a multi-row upsert may not touch one row
#: twice)
_LITERAL = r"(?:%s|-?\d+|'[^'%,]*')"
_HOLDABLE = re.compile(
    r"^(\s*INSERT INTO\s+(\w+)\s*\(([\w\s,]+)\)\s*VALUES\s*)"
    rf"(\((?:\s*{_LITERAL}\s*,)*\s*{_LITERAL}\s*\))"
    r"(\s+ON CONFLICT\s*(?:\(([\w\s,]+)\)\s*)?DO\s+(?:NOTHING|UPDATE\s+SET\s+([\w\s,.=+]+)))?"
    r"\s*$", re.IGNORECASE)
_ADDITIVE = re.compile(r"^\s*(\w+)\s*=\s*(\w+)\.(\w+)\s*\+\s*excluded\.(\w+)\s*$",
                       re.IGNORECASE)
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


@dataclass(frozen=True)
class Holdable:
    """A statement whose rows may be held back and sent as one multi-row ``INSERT``:
    ``head`` (``INSERT INTO t(…) VALUES``), ``row`` (its one row, ``(%s, 1, %s)``), ``tail``
    (its ``ON CONFLICT`` clause, or ``""``) and ``table``.  For an additive upsert, ``keys``
    are the parameters (indexes into a row's parameters) naming the conflicting row and
    ``sums`` those added to it: held rows of one key become one row, their ``sums`` added."""

    head: str
    row: str
    tail: str
    table: str
    keys: tuple[int, ...] | None = None
    sums: tuple[int, ...] = ()


def _holdable(translated: str) -> Holdable | None:
    found = _HOLDABLE.match(translated)
    if found is None:
        return None
    head, table, columns, row, tail, conflict, assignments = found.groups()
    held = Holdable(head, row, tail or "", table.lower())
    if assignments is None:
        return held
    # an additive upsert: each column it sets is a parameter of the row, added to the stored
    # value, and each column of the conflict key a parameter too
    names = [c.strip().lower() for c in columns.split(",")]
    values = [v.strip() for v in row.strip()[1:-1].split(",")]
    if conflict is None or len(names) != len(values):
        return None
    params = {name: sum(1 for v in values[:i] if v == "%s")
              for i, (name, v) in enumerate(zip(names, values, strict=True)) if v == "%s"}
    sums = []
    for assignment in assignments.split(","):
        add = _ADDITIVE.match(assignment)
        if add is None:
            return None
        column, owner, stored, excluded = (g.lower() for g in add.groups())
        if not (column == stored == excluded and owner == held.table and column in params):
            return None
        sums.append(params[column])
    keys = [params.get(c.strip().lower()) for c in conflict.split(",")]
    if any(k is None for k in keys):
        return None
    return Holdable(held.head, row, held.tail, held.table,
                    tuple(k for k in keys if k is not None), tuple(sums))


class _Held:
    """The rows of one ``Holdable`` statement held back: a list, or for an additive upsert
    one row per key, in the order each key was first held.  ``chunk``: how many rows are
    sent together once that many are held (``PgConnection._defer``)."""

    def __init__(self, holdable: Holdable, chunk: int = MANY_ROWS) -> None:
        self.holdable = holdable
        self.chunk = chunk
        self.rows: list[Sequence[Any]] = []
        self._by_key: dict[tuple[Any, ...], list[Any]] = {}

    def take(self) -> list[Sequence[Any]]:
        """The first ``chunk`` rows, no longer held (all of them for an additive upsert,
        whose held rows of one key are summed in place)."""
        if self.holdable.keys is not None or len(self.rows) <= self.chunk:
            taken, self.rows = self.rows, []
            self._by_key.clear()
            return taken
        taken, self.rows = self.rows[:self.chunk], self.rows[self.chunk:]
        return taken

    def add(self, rows: Sequence[Sequence[Any]]) -> None:
        keys = self.holdable.keys
        if keys is None:
            self.rows.extend(rows)
            return
        for row in rows:
            key = tuple(row[k] for k in keys)
            if None in key:  # NULLs never conflict: the row is its own
                self.rows.append(row)
                continue
            found = self._by_key.get(key)
            if found is None:
                self._by_key[key] = found = list(row)
                self.rows.append(found)
            else:
                for i in self.holdable.sums:
                    found[i] += row[i]


def _sizes(rows: int) -> list[int]:
    """``rows`` as statements of ``MANY_ROWS`` rows, then of powers of two, largest first,
    down to a rest of at most ``EXACT_ROWS`` rows, which is one statement of its own size."""
    sizes = [MANY_ROWS] * (rows // MANY_ROWS)
    rest = rows % MANY_ROWS
    size = MANY_ROWS
    while rest > EXACT_ROWS:
        if rest >= size:
            sizes.append(size)
            rest -= size
        size //= 2
    if rest:
        sizes.append(rest)
    return sizes


class Dialect:
    """The translated statements of one storage, and what ``PgConnection.pipelined`` needs to
    know of each (bounded)."""

    def __init__(self) -> None:
        self._statements: Bounded[str, str] = Bounded(STATEMENTS)
        self._touched: Bounded[str, frozenset[str] | None] = Bounded(STATEMENTS)
        self._many: Bounded[tuple[str, str, int, str], bytes] = Bounded(STATEMENTS)
        self._holdable: Bounded[str, Holdable | None] = Bounded(STATEMENTS)

    def statement(self, sql: str) -> str:
        found = self._statements.get(sql)
        if found is None:
            found = self._statements[sql] = translate(sql)
        return found

    def many_rows(self, head: str, row: str, rows: int, tail: str = "") -> bytes:
        """``head`` (``INSERT INTO t(…) VALUES``), ``rows`` copies of ``row`` (``(%s, 1, %s)``)
        with numbered parameters (``($1, 1, $2), ($3, 1, $4)``), then ``tail`` (an ``ON
        CONFLICT`` clause), encoded: psycopg's ``RawCursor`` sends it as it is, where a long
        ``%s`` text would be parsed (and encoded) again, in Python, at every execution."""
        key = (head, row, rows, tail)
        found = self._many.get(key)
        if found is None:
            width = row.count("%s")
            numbered = row.replace("%", "%%").replace("%%s", "$%d")  # one ``%`` per row
            found = self._many[key] = (head + ", ".join(
                [numbered % tuple(range(i * width + 1, i * width + width + 1))
                 for i in range(rows)]) + tail).encode()
        return found

    def holdable(self, translated: str) -> Holdable | None:
        """What ``PgConnection.pipelined`` needs to hold back a statement's rows, or None if
        it may not (``_HOLDABLE``)."""
        if translated in self._holdable:
            return self._holdable[translated]
        self._holdable[translated] = found = _holdable(translated)
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
    raw.prepared_max = PREPARED
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
        #: inside ``pipelined``: the rows of holdable inserts not sent yet, by statement, and
        #: the tables they go to
        self._deferred: dict[str, _Held] | None = None
        self._held_tables: set[str] = set()
        #: inside ``pipelined``: each statement held back so far, by the order it was first
        #: held in (``_chunk_rows``)
        self._phases: dict[str, int] = {}
        self._cursor: psycopg.RawCursor[Any] | None = None  # ``_many_rows_cursor``

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """psycopg's pipeline mode for the statements run inside: each is sent without
        waiting for the previous one's answer, and a round trip is paid only where a result
        is read (``_Cursor``) and at the end, so a write transaction's inserts and updates
        cost one round trip together instead of one each.  An error of a statement whose
        result nobody read is raised at the next read or when the block ends (psycopg's
        ``Pipeline`` exit); the caller then rolls back.

        Inside, the rows of an ``INSERT INTO t(…) VALUES (?, …)`` (plain, ``ON CONFLICT DO
        NOTHING`` or an additive upsert: ``Holdable``) are also held back and sent together,
        as one multi-row ``INSERT`` per statement (``_flush``), before the first other
        statement that names ``t`` (a read or change of it, another insert into it), before
        any statement that is not a plain ``SELECT``/``INSERT``/``UPDATE``/``DELETE``
        (``COMMIT``, ``SAVEPOINT``, …), in chunks of ``SEND_ROWS`` rows as soon as a statement
        holds that many (``_send``: PostgreSQL inserts them while the writer goes on), and when
        the block ends: what every statement sees is exactly what it would see had each insert
        been sent at once, and a batch of admissions sends one statement per table and
        ``SEND_ROWS`` instead of one per admission and table.  An insert's error is then raised
        by a later statement of the same transaction, as the pipeline's are."""
        self.pipeline_failed = False
        with self.raw.pipeline() as pipeline:
            self._pipeline = pipeline
            self._deferred = {}
            self._held_tables = set()
            self._phases = {}
            try:
                yield
                self._flush()
            finally:
                self._pipeline = None
                self._deferred = None

    def _defer(self, translated: str, rows: Sequence[Sequence[Any]]) -> bool:
        """Hold ``rows`` back if ``translated`` is a holdable insert (inside ``pipelined``),
        after sending what was held back that it could see, if it is not already held."""
        deferred = self._deferred
        if deferred is None:
            return False
        held = deferred.get(translated)
        if held is None:
            if deferred:
                touched = self._dialect.touched(translated)
                if touched is None or not touched.isdisjoint(self._held_tables):
                    self._flush()
            holdable = self._dialect.holdable(translated)
            if holdable is None:
                return False
            held = deferred[translated] = _Held(holdable, self._chunk_rows(translated))
            self._held_tables.add(holdable.table)
        held.add(rows)
        while len(held.rows) >= held.chunk:
            self._send(translated, held)
        return True

    def _chunk_rows(self, translated: str) -> int:
        """How many held rows of ``translated`` go out together next (``_Held.chunk``):
        ``SEND_ROWS``, but a statement's first chunk in the transaction is ``SEND_ROWS``
        halved as many times as the order it was first held in, modulo ``PHASES`` (64, 32,
        16, 8, 64, …).  An admission writes one row into most tables, so equal chunks would
        fill in the same admission and go out together: a burst larger than the socket's
        buffer, which the writer waits on while PostgreSQL inserts it, and no work for
        PostgreSQL in between.  Staggered, one table's chunk goes out every few admissions."""
        phase = self._phases.get(translated)
        if phase is None:
            phase = self._phases[translated] = len(self._phases) % PHASES
            return SEND_ROWS >> phase
        return SEND_ROWS

    def _send(self, translated: str, held: _Held) -> None:
        """Send a chunk of the rows held back for one statement now (``_Held.take``), so that
        PostgreSQL inserts them while the writer goes on with the next admissions, instead of
        every row of the transaction after its last admission.  Its table's rows stay in
        order (no other statement into it is held back: ``_defer``)."""
        rows = held.take()
        held.chunk = SEND_ROWS
        if not held.rows:
            assert self._deferred is not None
            del self._deferred[translated]
            self._held_tables.discard(held.holdable.table)
        try:
            self._insert_many(held.holdable, rows, self._many_rows_cursor())
        except psycopg.Error as exc:
            self.pipeline_failed = True
            raise _as_sqlite_error(exc) from exc

    def _flush(self) -> None:
        """Send the held-back rows: one multi-row ``INSERT`` per statement (and ``MANY_ROWS``),
        in the order the statements were first held back."""
        deferred = self._deferred
        if not deferred:
            return
        sending = list(deferred.values())
        deferred.clear()
        self._held_tables.clear()
        try:
            cur = self._many_rows_cursor()
            for held in sending:
                self._insert_many(held.holdable, held.rows, cur)
        except psycopg.Error as exc:
            self.pipeline_failed = True
            raise _as_sqlite_error(exc) from exc

    def _many_rows_cursor(self) -> psycopg.RawCursor[Any]:
        """The cursor of ``_insert_many``: each value goes to a column of the table, so an
        integer is typed, always ``int8`` (in C, where ``_UntypedInt`` is Python, and one type
        for every value, where psycopg's ``IntDumper`` picks the smallest: a prepared
        statement's types are fixed).  One per connection, kept: a new cursor and its adapters
        cost about as much as a chunk's execution by psycopg."""
        cur = self._cursor
        if cur is None or cur.connection is not self.raw or cur.closed:
            cur = self._cursor = psycopg.RawCursor(self.raw)
            cur.adapters.register_dumper(int, Int8Dumper)
        return cur

    def _insert_many(self, holdable: Holdable, rows: Sequence[Sequence[Any]],
                     cur: psycopg.RawCursor[Any]) -> None:
        """``rows`` as multi-row inserts of the sizes ``_sizes`` gives (37 rows: 32 and 5).
        Each size's text is prepared once per connection, so PostgreSQL neither parses nor
        plans it again (about half of its work for a text of many rows parsed each time)."""
        start = 0
        for size in _sizes(len(rows)):
            chunk = rows[start:start + size]
            start += size
            cur.execute(
                self._dialect.many_rows(holdable.head, holdable.row, size, holdable.tail),
                [value for row in chunk for value in row], prepare=True)

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
        """A holdable ``INSERT … VALUES (?, …)`` (``Holdable``) is sent as one statement of
        many rows (at most ``MANY_ROWS`` each): the server runs one statement instead of one
        per row, and psycopg pays its per-statement cost once.  Any other statement runs once
        per row."""
        rows = list(rows)
        if not rows:
            return
        translated = self._dialect.statement(sql)
        if self._defer(translated, rows):
            return
        try:
            holdable = self._dialect.holdable(translated) if len(rows) > 1 else None
            if holdable is None:
                with self.raw.cursor() as cur:
                    cur.executemany(translated, rows)
                return
            held = _Held(holdable)
            held.add(rows)
            self._insert_many(holdable, held.rows, self._many_rows_cursor())
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
