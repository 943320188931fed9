"""The PostgreSQL backend: any number of stateless nodes on one database.

``PostgresBackend`` implements ``store/protocol.Backend``; ``postgres_storage`` composes it into
a ``LedgerStorage``, so the admission path is shared with SQLite (the group-commit writer
thread of ``store/writer.py``, the rules' ``StateView`` inside the write transaction, the leaf,
its Merkle nodes and every projection in the same transaction: ``store/admission.py``), run
over a ``PgConnection``.  What PostgreSQL changes:

- **serialisation across nodes**: each write transaction begins by incrementing the one row of
  ``ledger_writes`` (``_PgWriterMemory.begin``); its row lock queues every writer of every node
  until the transaction ends, so the rules always see the latest committed state, exactly one
  of two racing revisions of a head wins, and sequences are gapless (``tail + 1`` under the
  lock; the primary keys are the backstop);
- **what a writer remembers**: the version that increment returns tells a node whether another
  node wrote since its own last transaction (then it forgets, as SQLite's ``data_version``
  tells it); a transaction that writes nothing a writer remembers (a checkpoint:
  ``writer.Job.keeps_memory``) locks the row without incrementing it (``_LOCK_KEEPING``), so
  signing checkpoints on one node never makes the node admitting forget;
- **reads**: a psycopg pool of read-only connections, one per reader thread; a read model's
  ``BEGIN`` is a ``REPEATABLE READ`` snapshot;
- **durability**: a job's future resolves after ``COMMIT`` returned (``synchronous_commit`` as
  the server is configured: ``on`` by default);
- **shared state**: the ``/api/changes`` cursor secret and epoch live in ``meta`` like every
  other fact, so a cursor issued by one node is honoured by every other.

The driver is psycopg 3 (synchronous, in the storage's threads): the read models and the
admission code are synchronous functions of a connection, shared with SQLite; asyncpg, async
only, would need a second, async copy of every one of them (docs/deployment.md has the
figures of both drivers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from alexandria.core.trust import Genesis
from alexandria.errors import Failed, ResyncRequired, StorageUnavailable
from alexandria.store import db_lock, query_budget
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.outage import Outages, outage_of
from alexandria.store.postgresql import connection, schema
from alexandria.store.postgresql.connection import Dialect, PgConnection
from alexandria.store.protocol import BUSY_TIMEOUT_S, READERS
from alexandria.store.read_ahead import Key
from alexandria.store.writer import BatchAborted
from alexandria.store.writer_memory import WriterMemory

T = TypeVar("T")
log = logging.getLogger(__name__)

#: how long a read waits for a connection of the pool (all busy, or the server unreachable)
#: before it is a 503: a reader retries sooner than a proxy gives up on it
READ_WAIT_S = 5.0
#: how long the pool keeps retrying a connection it lost before it gives that attempt up:
#: its retries back off exponentially (1 s, 2 s, 4 s…), so a long attempt would leave reads
#: refused for as long again after the database is back; given up, the next read starts a
#: new attempt at once
RECONNECT_S = 1.0
#: primary read connections of a node whose reads go to a replica (``--read-db``): the reads
#: the replica cannot answer yet
PRIMARY_READERS = 2
#: the first attempt of each write batch in pipeline mode (``PostgresBackend.attempt``)
pipelined_writes = True
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    return _PASSWORD.sub(r"\1***@", url)


#: the write lock: every node's write transaction changes the one row of ``ledger_writes``
_LOCK = "UPDATE ledger_writes SET version = version + 1 WHERE id = 1 RETURNING version"
#: the same lock for a transaction that writes nothing a writer remembers (a checkpoint): the
#: version stays, so no node's writer forgets what it remembers because of it
_LOCK_KEEPING = "SELECT version FROM ledger_writes WHERE id = 1 FOR UPDATE"


class _PgWriterMemory(WriterMemory):
    """``WriterMemory`` whose ``begin`` takes the write lock and learns whether another node
    wrote since this one's last transaction."""

    #: the lock's statement when ``PostgresBackend.begin`` sent it already (its answer comes
    #: in the same round trip as the batch's first question)
    locking: Any = None
    #: whether this transaction moves the version (``_LOCK``) or keeps it (``_LOCK_KEEPING``)
    bumps = True

    @property
    def lock_statement(self) -> str:
        return _LOCK if self.bumps else _LOCK_KEEPING

    def begin(self, conn: Any) -> None:
        cur, self.locking = self.locking, None
        row = (cur or conn.execute(self.lock_statement)).fetchone()
        if row is None:
            raise Failed("the database has no ledger_writes row", "STORAGE_CORRUPT")
        version = int(row[0])
        if self._version is None or version != self._version + (1 if self.bumps else 0):
            self.forget()
        self._version = version


class _PgReaders:
    """``size`` reader threads sharing a pool of read-only connections.  A read the database
    cannot answer (unreachable, or no connection of the pool within ``READ_WAIT_S``) is a
    typed 503 (``outage.classify``), reported to ``outages`` (one log line per episode).  A
    read waits ``READ_WAIT_S`` for a connection also during an outage: the pool tries to
    reconnect for ``RECONNECT_S`` at a time, each read starting a new attempt, and the first
    reads after the database is back are answered."""

    def __init__(self, url: str, size: int, dialect: Dialect, outages: Outages) -> None:
        self._dialect = dialect
        self._outages = outages
        # the pool warns of every failed attempt (one or two a second during an outage);
        # ``outages`` says it once an episode, with its cause
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url, min_size=size, max_size=size, open=True, configure=self._configure,
            kwargs={"autocommit": True, "application_name": "alexandria-read",
                    **({} if "connect_timeout" in url
                       else {"connect_timeout": connection.CONNECT_TIMEOUT_S})},
            check=ConnectionPool.check_connection, name="alexandria-read",
            reconnect_timeout=RECONNECT_S,
        )
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="alexandria-read")
        #: each session's ``statement_timeout`` (ms), set when a read first needs another one
        self._timeouts: weakref.WeakKeyDictionary[psycopg.Connection[Any], int] = \
            weakref.WeakKeyDictionary()

    @staticmethod
    def _configure(raw: psycopg.Connection[Any]) -> None:
        connection.configure(raw)
        raw.execute("SET default_transaction_read_only = on")

    def _run(self, fn: Callable[[Any], T], budget_s: float | None) -> T:
        try:
            with self._pool.connection(timeout=READ_WAIT_S) as raw:
                timeout = query_budget.statement_timeout_ms(budget_s)
                if self._timeouts.get(raw, 0) != timeout:
                    raw.execute(f"SET statement_timeout = {int(timeout)}")
                    self._timeouts[raw] = timeout
                conn = PgConnection(raw, self._dialect)
                try:
                    result = fn(conn)
                finally:
                    if conn.in_transaction and not conn.broken:
                        raw.execute("ROLLBACK")
        except (PoolTimeout, psycopg.Error, sqlite3.OperationalError) as exc:
            if (isinstance(exc, sqlite3.OperationalError) and budget_s is not None
                    and isinstance(exc.__cause__, psycopg.errors.QueryCanceled)):
                raise query_budget.timed_out(budget_s) from exc
            outage = outage_of(exc)
            if outage is None:
                raise
            # the pool replaces broken connections by itself
            self._outages.failed("reads", outage, exc)
            raise outage from exc
        self._outages.ok("reads")
        return result

    async def read(self, fn: Callable[[Any], T], budget_s: float | None = None) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, self._run, fn,
                                                                budget_s)

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        self._pool.close()


def _lsn(text: str | None) -> int:
    """A ``pg_lsn`` (``'16/B374D848'``) as an integer; 0 for NULL."""
    if not text:
        return 0
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


class _Behind(Exception):
    """The replica has not yet replayed this node's latest write."""


#: where the primary's WAL ends after a write: its insert position, past the commit record
#: even while that record waits in the WAL buffers (``synchronous_commit = off``), where the
#: write position (``pg_current_wal_lsn``) may still be before it
_WRITTEN = "SELECT pg_current_wal_insert_lsn()::text"
#: on a standby its replay position; on a primary (a ``--read-db`` that is not a standby) its
#: insert position, so it is never behind
_REPLAYED = ("SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
             " ELSE pg_current_wal_insert_lsn() END)::text")


class _ReplicaReads:
    """Reads served by a streaming replica (``serve --read-db``), correct where it lags:

    - **read-your-writes**: after each write transaction this node records the primary's WAL
      position (``floor``); a read goes to the replica only once it has replayed that far
      (asked once per write, ``seen`` remembers the answer), else to the primary;
    - **cursors**: a changes cursor issued against a longer log than the replica's (by
      another node, on the primary) is answered by the primary, never a 409;
    - a replica that cannot be reached: the read goes to the primary.

    What another node wrote shows on this node's replica reads when the replica has replayed
    it (streaming lag, typically milliseconds)."""

    def __init__(self, replica: _PgReaders, primary: _PgReaders) -> None:
        self.replica = replica
        self.primary = primary
        self.floor = 0
        self.seen = 0

    async def read(self, fn: Callable[[Any], T], budget_s: float | None = None) -> T:
        floor = self.floor

        def on_replica(conn: Any) -> T:
            if self.seen < floor:
                replayed = _lsn(conn.execute(_REPLAYED).fetchone()[0])
                self.seen = max(self.seen, replayed)
                if replayed < floor:
                    raise _Behind()
            return fn(conn)

        try:
            return await self.replica.read(on_replica, budget_s)
        except _Behind:
            pass
        except ResyncRequired as exc:
            if exc.code != "CURSOR_BEYOND_LOG":
                raise
        except Failed as exc:
            if exc.code != "STORAGE_UNAVAILABLE":
                raise
        return await self.primary.read(fn, budget_s)

    def close(self) -> None:
        self.replica.close()
        self.primary.close()


def postgres_storage(url: str, genesis: Genesis, read_url: str | None = None) -> LedgerStorage:
    """The storage of the library in the PostgreSQL database ``url`` (not yet opened), its
    reads optionally from a streaming replica (``read_url``: ``serve --read-db``)."""
    return LedgerStorage(PostgresBackend(url, read_url), genesis)


class PostgresBackend:
    """A library in PostgreSQL (``alexandria serve --db postgresql://…``;
    ``store/protocol.Backend``), its reads optionally from a streaming replica (``read_url``)."""

    def __init__(self, url: str, read_url: str | None = None) -> None:
        self.path = redacted(url)  # names the library in messages
        self._pg_memory = _PgWriterMemory()
        self.memory: WriterMemory = self._pg_memory
        self.url = url
        self.read_url = read_url
        self.dialect = Dialect()
        self._readers: _PgReaders | _ReplicaReads | None = None
        self._replica: _ReplicaReads | None = None
        self._reconnect_lock = threading.Lock()
        #: whether the attempt under way is pipelined (``attempt``), and the batch's question
        #: sent with the lock (``begin``) whose answer ``absent`` reads
        self._pipelining = False
        self._asked: tuple[list[str], Any] | None = None

    async def open_readers(self, outages: Outages) -> None:
        if self.read_url is None:
            self._readers = await asyncio.to_thread(_PgReaders, self.url, READERS, self.dialect,
                                                    outages)
            return
        primary = await asyncio.to_thread(_PgReaders, self.url, PRIMARY_READERS, self.dialect,
                                          outages)
        try:
            # the primary answers what the replica cannot: a replica outage is its own
            replica = await asyncio.to_thread(
                _PgReaders, self.read_url, READERS, self.dialect,
                Outages(f"{redacted(self.read_url)} (replica)"))
        except BaseException:
            primary.close()
            raise
        self._replica = self._readers = _ReplicaReads(replica, primary)

    async def read(self, fn: Callable[[sqlite3.Connection], T], budget_s: float | None) -> T:
        readers = self._readers
        assert readers is not None, "storage is not open"
        return await readers.read(fn, budget_s)

    def read_ahead(self, what: str, sequences: Sequence[Key]) -> None:
        """None: the server reads ahead of the pages by itself."""

    def fetch_ahead(self, sql: str, keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        return {}

    def kept_ahead(self, sequences: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        return {}

    def free_bytes(self) -> int | None:
        """None: the disk is the database server's."""
        return None

    def replaced(self) -> Failed | None:
        return None

    def close(self) -> None:
        """Nothing held beyond the connections: the shared lock ends with the writer's."""

    def before_commit(self, conn: sqlite3.Connection) -> None:
        pass

    def committed(self, conn: sqlite3.Connection) -> None:
        pass

    def between_batches(self, conn: sqlite3.Connection) -> None:
        pass

    async def close_readers(self) -> None:
        if self._readers is not None:
            await asyncio.to_thread(self._readers.close)
            self._readers = None
            self._replica = None

    def _note_written(self, conn: PgConnection, cur: Any | None) -> None:
        """The primary's WAL position after this node's latest write: replica reads wait for
        it (``_ReplicaReads``)."""
        if self._replica is None:
            return
        row = (cur or conn.execute(_WRITTEN)).fetchone()
        self._replica.floor = max(self._replica.floor, _lsn(row[0]))

    def connect_writer(self) -> Any:
        try:
            raw = connection.connect(self.url)
        except psycopg.Error as exc:
            raise StorageUnavailable(f"cannot connect to {self.path}: {exc}".strip(),
                                     db=self.path) from exc
        try:
            applied = schema.apply(raw)
            if applied:
                log.info("%s: schema migrated to version %s", self.path, applied[-1])
            # held while connected: ``restore --replace`` and ``migrate`` refuse meanwhile
            db_lock.pg_shared(raw, self.path)
            raw.execute(f"SET lock_timeout = '{int(BUSY_TIMEOUT_S * 1000)}ms'")
        except BaseException:
            raw.close()
            raise
        return PgConnection(raw, self.dialect)

    def begin(self, conn: Any, revisions: Sequence[str], keeps_memory: bool = False) -> None:
        """``BEGIN`` (read committed: after the write lock every statement sees the latest
        commits); the lock itself is ``_PgWriterMemory.begin``.  A connection the server
        dropped is replaced first, so a database restart costs the batch in flight only; one
        found dropped by ``BEGIN`` itself (the server restarted while the writer was idle) is
        replaced and ``BEGIN`` sent again, as nothing was done on it yet."""
        self._replace_if_broken(conn)
        try:
            conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        except sqlite3.OperationalError:
            if not conn.broken:
                raise
            self._replace_if_broken(conn)
            conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        # in pipeline mode the lock and the batch's question (``absent``; it runs after the
        # lock, so it sees every commit before it) go out with ``BEGIN``: one round trip
        self._asked = None
        self._pg_memory.bumps = not keeps_memory
        if self._pipelining:
            self._pg_memory.locking = conn.execute(self._pg_memory.lock_statement)
            ids = list(revisions)
            if ids:
                self._asked = ids, self._ask_absent(conn, ids)

    def _replace_if_broken(self, conn: Any) -> None:
        if not conn.broken:
            return
        with self._reconnect_lock:
            raw = connection.connect(self.url)
            try:
                db_lock.pg_shared(raw, self.path)  # a restore may be under way
            except BaseException:
                raw.close()
                raise
            conn.raw = raw
            conn.raw.execute(f"SET lock_timeout = '{int(BUSY_TIMEOUT_S * 1000)}ms'")
        # the database may have been restored meanwhile: the log is checked again
        self.memory.forget()

    def absent(self, conn: Any, revisions: Sequence[str]) -> set[str]:
        """One statement for the whole batch instead of one ``StateView.admitted`` question
        per admission: in pipeline mode each question waited for the server to run every
        statement queued before it (a round trip per admission)."""
        asked, self._asked = self._asked, None
        if asked is None:
            ids = list(revisions)
            if not ids:
                return set()
            asked = ids, self._ask_absent(conn, ids)
        ids, cur = asked
        return set(ids).difference(row[0] for row in cur.fetchall())

    @staticmethod
    def _ask_absent(conn: Any, ids: list[str]) -> Any:
        # never prepared: a generic plan chosen while the table was small scans all of it
        return conn.execute("SELECT id FROM revisions WHERE id = ANY(?)", (ids,), prepare=False)

    @contextlib.contextmanager
    def attempt(self, conn: Any, isolate: bool) -> Iterator[None]:
        """A batch's first attempt runs in pipeline mode (``PgConnection.pipelined``): the
        rows an admission writes go out without a round trip each.  Any failure — one the
        pipeline reports late included — rolls the transaction back and aborts the attempt,
        and the writer runs the batch again, each item in its own savepoint, without the
        pipeline, so a failing item is told its own error (as on SQLite)."""
        if isolate or not pipelined_writes or conn.broken:
            yield
            self._note_written(conn, None)
            return
        try:
            with conn.pipelined():
                self._pipelining = True
                try:
                    yield
                finally:
                    self._pipelining = False
                    self._pg_memory.locking = None
                    self._asked = None
                # after the COMMIT, in the same round trip
                lsn = (conn.execute(_WRITTEN)
                       if self._replica is not None else None)
            if conn.pipeline_failed:  # a job caught the error: the COMMIT was a rollback
                raise BatchAborted()
            self._note_written(conn, lsn)
        except (psycopg.Error, sqlite3.Error, BatchAborted) as exc:
            self.memory.forget()
            if not conn.broken and conn.in_transaction:
                with contextlib.suppress(psycopg.Error):
                    conn.raw.execute("ROLLBACK")
            cause = exc.__cause__ if isinstance(exc, BatchAborted) else exc
            raise BatchAborted() from cause


