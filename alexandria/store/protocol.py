"""What a storage backend promises: the small protocol ``store/sqlite.py`` and
``store/postgresql/storage.py`` implement, composed into ``LedgerStorage``, which writes
through ``store/writer.py`` and admits through ``store/admission.py`` the same way over either.

Connections are the part of ``sqlite3.Connection`` both backends provide (``execute`` and
``executemany`` with ``?`` or ``:name`` parameters, ``fetchone``/``fetchall``/iteration,
``in_transaction``): the admission code and the read models are written once against it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from alexandria.errors import Failed
from alexandria.store.outage import Outages
from alexandria.store.read_ahead import Key
from alexandria.store.writer_memory import WriterMemory

T = TypeVar("T")
#: how long a write transaction waits for another process's (SQLite) or node's (PostgreSQL)
BUSY_TIMEOUT_S = 30.0
READERS = 4  # read connections, one thread each: SQLite releases the GIL while it reads


class WriteBackend(Protocol):
    """How the writer writes to one database.  A backend promises:

    - ``connect_writer`` returns the one write connection of this storage, its schema created
      or migrated; it is used by the writer thread alone from then on;
    - ``begin`` starts a write transaction that no other writer of this database (another
      process, another node) runs beside until it commits or rolls back, so the rules' checks
      and the inserts are atomic; it raises ``sqlite3.Error`` when it cannot (the batch is a
      503 ``STORAGE_BUSY`` or an outage) or a ``Failed`` the batch is answered with;
      ``revisions`` are the ids ``absent`` will be asked about, which a backend may ask ahead;
      ``keeps_memory``: no job of the batch writes anything a writer remembers (checkpoints),
      so the transaction need not make another node's writer forget;
    - a ``COMMIT`` that returned is durable: a job's future is resolved only after it;
    - ``memory.begin``, called first inside each write transaction, forgets what the writer
      remembers when another connection wrote since this one's last transaction;
    - ``absent`` answers which of the revision ids are not admitted, inside the transaction
      (an empty set is always right: each is then asked of the database);
    - ``attempt`` wraps one attempt of a batch (its ``begin`` to its ``COMMIT``) and raises
      ``writer.BatchAborted`` if the attempt failed after all (the writer runs the batch again,
      each item in its own savepoint); ``isolate`` is True for that second attempt;
    - ``before_commit``, ``committed`` and ``between_batches`` do the backend's own work at
      those moments (nothing if it has none) and never fail a batch that held;
    - ``replaced`` says why the database is no longer the one opened, else None.
    """

    path: str
    memory: WriterMemory

    def connect_writer(self) -> sqlite3.Connection: ...

    def begin(self, conn: sqlite3.Connection, revisions: Sequence[str],
              keeps_memory: bool = False) -> None: ...

    def absent(self, conn: sqlite3.Connection, revisions: Sequence[str]) -> set[str]: ...

    def attempt(self, conn: sqlite3.Connection, isolate: bool) -> AbstractContextManager[None]: ...

    def before_commit(self, conn: sqlite3.Connection) -> None: ...

    def committed(self, conn: sqlite3.Connection) -> None: ...

    def between_batches(self, conn: sqlite3.Connection) -> None: ...

    def replaced(self) -> Failed | None: ...


class ReadBackend(Protocol):
    """How the read models read one database.  A backend promises:

    - ``read`` runs ``fn`` on one of its read connections, on that connection's thread, and
      returns its result; ``fn`` sees committed state only (a transaction it begins is one
      snapshot), and is stopped past ``budget_s`` seconds with ``QUERY_TIMEOUT`` (None: no
      budget); a database it cannot reach is a typed 503 (``store/outage.py``);
    - ``open_readers`` opens the read connections once the writer initialised the database
      (reads the database cannot answer are reported to ``outages``), ``close_readers``
      closes them and any other helper of the backend (after the writer thread ended);
    - ``read_ahead``, ``fetch_ahead`` and ``kept_ahead`` only ever save time: rows of
      ``signed_sql`` that never change once written, fetched several at once beside the read
      connection (a backend without a read-ahead does nothing and returns none);
    - ``free_bytes`` is the room left for the database, None where it cannot tell.
    """

    async def open_readers(self, outages: Outages) -> None: ...

    async def close_readers(self) -> None: ...

    async def read(self, fn: Callable[[sqlite3.Connection], T], budget_s: float | None) -> T: ...

    def read_ahead(self, what: str, sequences: Sequence[Key]) -> None: ...

    def fetch_ahead(self, sql: str, keys: Sequence[int]) -> dict[int, tuple[Any, ...]]: ...

    def kept_ahead(self, sequences: Sequence[int]) -> dict[int, tuple[Any, ...]]: ...

    def free_bytes(self) -> int | None: ...


class Backend(WriteBackend, ReadBackend, Protocol):
    """A storage backend: the writer's and the readers' side of one database, and ``close``,
    which releases whatever the backend holds (its locks) once both sides are closed."""

    def close(self) -> None: ...
