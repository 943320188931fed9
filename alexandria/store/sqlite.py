"""The SQLite backend: one database file in WAL mode, one writer thread and a few reader threads.

``SqliteBackend`` implements ``store/protocol.Backend``; ``sqlite_storage`` composes it into a
``LedgerStorage`` (the writer, its group commit and the admission transaction are written once,
in ``store/writer.py`` and ``store/admission.py``).  What SQLite changes: the writer's
transaction is a ``BEGIN IMMEDIATE`` that waits for another process's write with short sleeps;
``synchronous=FULL``, so a job's future is resolved only after its transaction is durable; the
WAL is checkpointed by a thread of its own after commits (``store/wal_checkpointer.py``); and
what the writer remembers is forgotten when ``PRAGMA data_version`` says another connection
committed.

The storage owns its threads and their ``sqlite3`` connections: the writer thread holds the one
write connection for as long as the storage is open, and ``READERS`` read-only connections each
live on a thread of their own, so a slow read (a search over common words) holds up at most one
of them, never an unrelated read nor the writer.  Reads see committed state only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from alexandria.core.trust import Genesis
from alexandria.errors import Failed
from alexandria.files import create_private
from alexandria.store import feed, migrations, query_budget
from alexandria.store.db_lock import SharedLock
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.outage import Outages
from alexandria.store.protocol import BUSY_TIMEOUT_S, READERS
from alexandria.store.read_ahead import Key, ReadAhead
from alexandria.store.read_connections import ThreadConnections
from alexandria.store.wal_checkpointer import JOURNAL_SIZE_LIMIT, WalCheckpointer
from alexandria.store.writer_memory import WriterMemory

T = TypeVar("T")

WRITER_CACHE_KIB = 65_536  # the writer's page cache: the hot B-tree pages of every index
# The read connections' page caches together: a library larger than the host's
# memory is read mostly from disk, and every lookup first walks the interior pages of its
# B-trees.  SQLite keeps the pages it read last in each connection's own cache, which the
# operating system cannot reclaim, so the upper levels of the hot indexes stay in memory and
# a cold lookup costs its leaf pages only.  With the writer's cache and the interpreter this
# keeps a server under its 300 MB budget (docs/deployment.md "Memory"); the read-ahead
# connections (`store/read_ahead.py`) hold 16 MiB more, the writer 64 MiB when it writes.
READ_CACHE_KIB = 65_536


class _Readers:
    """``size`` read-only connections, each opened on (and used by) one thread of a pool, each
    with its share of ``cache_kib`` of page cache."""

    def __init__(self, path: str, size: int, cache_kib: int = READ_CACHE_KIB) -> None:
        self.path = path
        self._deadlines = query_budget.Deadlines()
        # each connection's share of the cache
        self._connections = ThreadConnections(path, max(2_000, cache_kib // size),
                                              self._deadlines.handler,
                                              query_budget.PROGRESS_STEPS)
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="alexandria-read")

    def _run(self, fn: Callable[[sqlite3.Connection], T], budget_s: float | None) -> T:
        conn = self._connections.connection()
        try:
            with self._deadlines.running(budget_s):
                return fn(conn)
        finally:
            if conn.in_transaction:  # a read that began a snapshot and failed keeps none open
                conn.execute("ROLLBACK")

    async def read(self, fn: Callable[[sqlite3.Connection], T],
                   budget_s: float | None = None) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, fn,
                                                                budget_s)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._connections.close()


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def sqlite_storage(path: str | Path, genesis: Genesis) -> LedgerStorage:
    """The storage of the library in the SQLite file ``path`` (not yet opened)."""
    return LedgerStorage(SqliteBackend(path), genesis)


class SqliteBackend:
    """A library in one SQLite file (``store/protocol.Backend``): how the writer connects and
    waits for another process's write, the WAL's checkpoints after commits, and the read
    connections (with their read-ahead)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        #: forgets when ``PRAGMA data_version`` says another connection committed
        self.memory = WriterMemory()
        self._readers: _Readers | None = None
        self._ahead: ReadAhead | None = None
        self._checkpointer: WalCheckpointer | None = None
        self._feed_start = 0  # the first owner of the next range of recent feed rows to move
        self._lock = SharedLock(self.path)
        self._identity: tuple[int, int] | None = None  # the opened file's (device, inode)

    # --- lifecycle ---------------------------------------------------------------------------

    async def open_readers(self, outages: Outages) -> None:
        self._readers = _Readers(self.path, READERS)
        self._ahead = ReadAhead(self.path)

    def connect_writer(self) -> sqlite3.Connection:
        # held until close: ``restore --replace`` and ``migrate`` refuse meanwhile (db_lock)
        self._lock.acquire()
        fresh = not Path(self.path).exists()
        # before anything below writes to it: a newer or earlier layout, an old leaf format
        migrations.check_database(self.path)
        if fresh:
            # 0600 in a 0700 directory if new: it holds every actor's private lists and the
            # cursor secret; SQLite gives the -wal and -shm files the database file's mode
            create_private(Path(self.path))
        # handed to the writer thread once open: it alone uses the connection from then on
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        if fresh:
            # every admission dirties a leaf page in each index keyed by a hash (revision ids,
            # roots); the commit writes each whole page to the WAL, so smaller pages mean fewer
            # bytes written and checkpointed per admission
            conn.execute("PRAGMA page_size = 4096")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA busy_timeout = 30000")  # opening; _begin waits for writes
        try:
            migrations.apply(conn, self.path)
        except BaseException:
            conn.close()
            raise
        conn.execute("PRAGMA busy_timeout = 0")  # from now on _begin does the waiting
        conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # see wal_checkpointer
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        # this connection's commits are checkpointed by a thread of its own (wal_checkpointer)
        self._checkpointer = WalCheckpointer(self.path)
        self._identity = _identity(self.path)
        return conn

    def replaced(self) -> Failed | None:
        """The database file is no longer the one this storage opened (moved, deleted or
        copied over behind its back): whatever it wrote now would be lost."""
        if self._identity is None or _identity(self.path) == self._identity:
            return None
        return Failed(
            f"{self.path} was replaced or removed while this server had it open (a restore or"
            " a copy behind its back): it takes no writes; restart it to serve the file now"
            " at that path (docs/operations.md)", "DATABASE_REPLACED", path=self.path)

    def close(self) -> None:
        self._lock.release()

    async def close_readers(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        if self._readers is not None:
            await asyncio.to_thread(self._readers.close)
            self._readers = None
        if self._ahead is not None:
            await asyncio.to_thread(self._ahead.close)
            self._ahead = None

    def begin(self, conn: sqlite3.Connection, revisions: Sequence[str],
              keeps_memory: bool = False) -> None:
        """``BEGIN IMMEDIATE``, waiting for another process's write transaction with short
        sleeps: SQLite's own busy handler backs off to 100 ms sleeps, which starves a
        multi-process server of throughput.  (Any commit moves the other connections'
        ``data_version``, whatever ``keeps_memory`` says: forgetting costs SQLite's writer
        only local reads.)"""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        pause = 0.0002
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.002)

    def free_bytes(self) -> int | None:
        try:
            found = os.statvfs(Path(self.path).resolve().parent)
        except OSError:
            return None
        return found.f_bavail * found.f_frsize

    def absent(self, conn: sqlite3.Connection, revisions: Sequence[str]) -> set[str]:
        """Nothing learnt ahead: each ``StateView.admitted`` question is one index lookup in
        this process."""
        return set()

    def attempt(self, conn: sqlite3.Connection, isolate: bool) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def before_commit(self, conn: sqlite3.Connection) -> None:
        """The move of recent feed rows (``feed.merge_recent``).  Any start is right (a
        rolled-back move leaves the rows where they were), so the start is not forgotten with
        the writer's memory."""
        self._feed_start = feed.merge_recent(conn, self._feed_start, self.memory.tail(conn)[0])

    def committed(self, conn: sqlite3.Connection) -> None:
        if self._checkpointer is not None:
            self._checkpointer.kick()

    def between_batches(self, conn: sqlite3.Connection) -> None:
        if self._checkpointer is not None and self._checkpointer.catch_up:
            self._checkpointer.catch_up_on(conn)  # after the answers: see wal_checkpointer

    async def read(self, fn: Callable[[sqlite3.Connection], T], budget_s: float | None) -> T:
        readers = self._readers
        assert readers is not None, "storage is not open"
        return await readers.read(fn, budget_s)

    def read_ahead(self, what: str, sequences: Sequence[Key]) -> None:
        """Bring the pages of the rows ``what`` (``"records"``: revisions and their leaves, by
        sequence; the other names are ``store/read_ahead._ROWS_SQL``'s) at ``sequences`` into
        memory several at once (``store/read_ahead.py``), before a read connection reads them
        one by one."""
        if self._ahead is not None:
            self._ahead.rows(what, sequences)

    def fetch_ahead(self, sql: str, keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        if self._ahead is None:
            return {}
        return self._ahead.fetch(sql, keys)

    def kept_ahead(self, sequences: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        if self._ahead is None:
            return {}
        return self._ahead.kept(sequences)
