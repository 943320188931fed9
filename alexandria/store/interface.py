"""The storage interface the rest of the package relies on: ``Storage`` (the service, the API),
``Records`` (the read models), and the values they return.

The rules never see storage: they get a ``rules.view.StateView``, which the storage provides
*inside* its write transaction.  ``store/ledger_storage.LedgerStorage`` is the one
implementation, composed of a backend (``store/protocol.py``: SQLite, PostgreSQL), the
group-commit writer (``store/writer.py``) and the admission functions (``store/admission.py``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from alexandria.core.trust import AuthorityCertificate, Genesis
from alexandria.errors import Failed
from alexandria.rules.admission import Candidate
from alexandria.rules.view import StateView
from alexandria.store.outage import Outages
from alexandria.store.read_ahead import Key

T = TypeVar("T")


@dataclass(frozen=True)
class Admitted:
    """An admission's outcome: ``created`` is False for an exact retry (HTTP 200).
    ``admission``: for a new admission, its canonical ``admission`` object as spliced into
    ``signed`` (``records.signed_record_bytes``)."""

    created: bool
    id: str
    root: str
    sequence: int
    signed: bytes
    admission: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class DryRun:
    id: str
    root: str
    admitted: bool  # already admitted: publishing it would be an idempotent retry


@dataclass(frozen=True)
class AuthorityAdmitted:
    created: bool
    sequence: int
    admitted_at: str
    document: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "admitted_at": self.admitted_at,
            "document": self.document,
        }


@dataclass(frozen=True)
class Replayed:
    """An entry of another copy of this log (a mirror's origin, a restore's catch-up source)
    to store at its recorded ``sequence`` and admission time, after its stateless checks:
    a contribution's ``candidate`` (``admission.prepare``), or an authority ``document``."""

    sequence: int
    kind: str
    leaf: bytes = field(repr=False)
    admitted_ms: int
    candidate: Candidate | None = field(default=None, repr=False)
    document: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class Transaction:
    """What one write transaction of a storage's writer cost (``Storage.observe_writer``):
    the items of its jobs (admissions, batch lines, other writes), the wall time from taking
    them to their commit, and the writer thread's CPU time in it; the rest it waited (for the
    disk's sync, the database's round trips, the GIL)."""

    items: int
    wall_s: float
    cpu_s: float


class Records(Protocol):
    """What the read models need of a storage beside a read connection: signed records
    assembled on it (``store/signed_records.py``) and the read-ahead of a page's rows."""

    def signed(self, conn: sqlite3.Connection, sequence: int) -> bytes | None:
        """``JCS(signed record)`` of the revision at ``sequence``, None if there is none."""

    def signed_many(self, conn: sqlite3.Connection, sequences: Sequence[int]) -> list[bytes]:
        """Those of several, in the given order (a sequence with no revision left out)."""

    def read_ahead(self, what: str, sequences: Sequence[Key]) -> None:
        """Bring the rows ``what`` at ``sequences`` into memory several at once, before a
        read connection reads them one by one (nothing where the backend has no read-ahead)."""


class Storage(Records, Protocol):
    """A library's storage, as the service, the API and the read models use it
    (``store/ledger_storage.LedgerStorage`` over a backend of ``store/protocol.py``).

    Promises: a write's or an admission's future resolves only once its transaction is
    durable; with several processes or nodes on one database, exactly one of two concurrent
    revisions of the same head wins; reads see committed state only, each stopped past
    ``query_timeout_s``; a failure of the database is a typed 503 (``store/outage.py``),
    reported once per episode in ``outages``."""

    path: str  # names the library in messages: never holds a password
    genesis: Genesis
    outages: Outages
    query_timeout_s: float | None
    clock: Callable[[], int]

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    @property
    def writing(self) -> bool:
        """False once the writer thread has ended, or before the storage was opened."""

    def replaced(self) -> Failed | None:
        """Why the database is no longer the one opened (a SQLite file replaced), or None."""

    def observe_writer(self, observe: Callable[[Transaction], None]) -> None:
        """Call ``observe`` on the writer thread after each write transaction, before its
        answers are handed over (a meter: what it raises is logged, never the writer's
        failure)."""

    def free_bytes(self) -> int | None: ...

    async def probe_write(self) -> None: ...

    async def meta(self, key: str) -> str | None: ...

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a synchronous read function on a read connection, on its thread."""

    async def write(self, fn: Callable[[sqlite3.Connection], T], checks_first: bool = False,
                    keeps_memory: bool = False) -> T:
        """Run ``fn`` inside the next group-commit write transaction (``store/writer.py``);
        ``keeps_memory``: ``fn`` writes nothing the writers remember (a checkpoint)."""

    def state_view(self, conn: sqlite3.Connection) -> StateView:
        """The rules' view over ``conn``, inside a write transaction of this storage."""

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun: ...

    def submit(self, cand: Candidate, dry_run: bool = False) -> asyncio.Future[Admitted | DryRun]:
        """``admit`` without a coroutine: the future resolves once the admission is durable."""

    async def admit_many(self, cands: Sequence[Candidate], dry_run: bool = False,
                         ) -> list[Admitted | DryRun | Exception]: ...

    def submit_many(self, cands: Sequence[Candidate], dry_run: bool = False,
                    ) -> asyncio.Future[list[Admitted | DryRun | Exception]]: ...

    async def admit_authority(self, document: Any) -> AuthorityAdmitted: ...

    async def authority_documents(self) -> list[dict[str, Any]]: ...

    async def replay(self, entries: Sequence[Replayed]) -> tuple[int, Exception | None]:
        """Append the next entries of another copy of this log; how many were stored and why
        it stopped."""

    async def store_checkpoint(self, size: int, root: bytes, note: str, key: str,
                               received_at: str) -> None: ...

    async def key_authorities(
        self, key: str, upto: int
    ) -> tuple[list[tuple[int, AuthorityCertificate]], bool]: ...

    async def authority_keys(self, upto: int) -> list[str]: ...

    async def tail(self) -> tuple[int, str]: ...

    async def admitted_ms(self, sequence: int) -> int: ...

    async def root_at(self, size: int) -> bytes: ...

    async def entry(self, rev: str) -> bytes | None:
        """``JCS(signed record)`` of a revision."""

    async def head_entry(self, rev: str) -> bytes | None:
        """``JCS(signed record)`` of the current head of the object ``rev`` belongs to."""

    async def log_size(self) -> int: ...
