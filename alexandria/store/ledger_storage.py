"""A library's storage: one backend (``store/protocol.py``) composed with the group-commit writer
(``store/writer.py``), the admission functions (``store/admission.py``) and the signed-record
assembly (``store/signed_records.py``), written once for every backend.

Every write goes through the writer's one thread per process, which commits whatever is
queued together in one write transaction and resolves each job's future once that transaction
is durable.  An admission raises its refusals before it writes anything, so it runs checks
first (no savepoint); every other write runs in a savepoint of its own (the rerun policy:
``store/writer.py``).  Every state check runs inside the write transaction, so with several
server processes on one database the checks and the insert are atomic: exactly one of two
concurrent revisions of the same head wins.

``sqlite_storage`` (``store/sqlite.py``) and ``postgres_storage``
(``store/postgresql/storage.py``) build one over their backend; ``store/backends.storage_for``
picks the backend a ``--db`` names.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import orjson

from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.leaf import LEAF_FORMAT, document_of
from alexandria.core.timestamps import now_ms, parse_ms
from alexandria.core.trust import AuthorityCertificate, Genesis
from alexandria.errors import Failed, Refused
from alexandria.rules.admission import Candidate
from alexandria.rules.authority import prepare_authority_document
from alexandria.store import admission, feed, schema, search_index
from alexandria.store.admission import Ledger, WriteView
from alexandria.store.interface import (
    Admitted,
    AuthorityAdmitted,
    DryRun,
    Replayed,
    Storage,
    Transaction,
)
from alexandria.store.merkle_nodes import node_reader, read_together, tree_size
from alexandria.store.outage import Outages
from alexandria.store.protocol import Backend
from alexandria.store.read_ahead import Key
from alexandria.store.signed_records import SignedRecords
from alexandria.store.writer import Writer, only

T = TypeVar("T")
log = logging.getLogger(__name__)


class LedgerStorage(Storage):
    """The ``Storage`` of a library over ``backend``: what to write and read, and in which
    job of the writer; how the database is reached is the backend's alone."""

    def __init__(self, backend: Backend, genesis: Genesis) -> None:
        self.backend = backend
        self.path = backend.path  # names the library in messages: never holds a password
        self.genesis = genesis
        #: the outages in progress (``store/outage.py``): what ``/healthz`` reports
        self.outages = Outages(self.path)
        #: each read's time budget in seconds, None for none (``store/query_budget.py``)
        self.query_timeout_s: float | None = None
        self.records = SignedRecords(backend)
        #: what the admission functions need beside the write connection
        self.ledger = Ledger(genesis, backend.memory, self.records, now_ms)
        self._writer = Writer(backend, self.outages)

    @property
    def clock(self) -> Callable[[], int]:
        """The server clock (ms) admissions are timed by."""
        return self.ledger.clock

    @clock.setter
    def clock(self, clock: Callable[[], int]) -> None:
        self.ledger.clock = clock

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        self._writer.conn = await asyncio.to_thread(self.backend.connect_writer)
        await self.write(self._init_meta)
        await self.write(search_index.ensure)
        await self.backend.open_readers(self.outages)

    async def close(self) -> None:
        try:
            await self._writer.close()  # after the jobs already queued
            await self.backend.close_readers()
            conn = self._writer.conn
            if conn is not None:
                conn.close()
                self._writer.conn = None
        finally:
            self.backend.close()

    def _init_meta(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'genesis_pin'").fetchone()
        if row is None:
            conn.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?)",
                [
                    ("genesis_pin", self.genesis.pin),
                    ("genesis", canonical(self.genesis.document).decode()),
                    ("cursor_secret", secrets.token_hex(32)),
                    ("epoch", secrets.token_hex(16)),
                ],
            )
        elif row[0] != self.genesis.pin:
            raise Failed(
                f"{self.path} belongs to the library with genesis {row[0]}, not {self.genesis.pin}",
                "GENESIS_MISMATCH",
            )
        if not schema.check_leaf_format(conn, self.path):
            conn.execute("INSERT INTO meta(key, value) VALUES ('leaf_format', ?)", (LEAF_FORMAT,))
        if feed.ensure_layout(conn):
            log.info("%s: feed membership rebuilt (%s)", self.path, feed.layout())

    @property
    def writing(self) -> bool:
        """False once the writer thread has ended (it runs from the first write until close),
        or before the storage was opened: ``/healthz`` is not ready then."""
        return self._writer.running

    def observe_writer(self, observe: Callable[[Transaction], None]) -> None:
        self._writer.observe = observe

    def replaced(self) -> Failed | None:
        """Why this node's database is no longer the one it opened (a SQLite file replaced
        behind its back), or None."""
        return self.backend.replaced()

    async def meta(self, key: str) -> str | None:
        row = await self.read(
            lambda conn: conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        )
        return None if row is None else str(row[0])

    def free_bytes(self) -> int | None:
        """Bytes free for this process where the database is stored, or None where the
        backend cannot tell (a database server's disk)."""
        return self.backend.free_bytes()

    async def probe_write(self) -> None:
        """A write transaction that needs room on the disk, through the writer as any write:
        a row of ``PROBE_BYTES`` stored and removed again.  While writes fail
        (``outages``), the library's probe (``Library.monitoring``) runs it to learn when
        they work again; it raises what an admission would."""
        await self.write(_probe, checks_first=True)

    # --- writes ------------------------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T], checks_first: bool = False,
                    keeps_memory: bool = False) -> T:
        """Run ``fn`` inside the next group-commit write transaction (its own savepoint) and
        return its result once the transaction is durable.  An exception rolls back ``fn``'s
        writes only and is raised here.  ``keeps_memory``: ``fn`` writes nothing the writer
        remembers (``writer.Job``)."""
        result: T = await self._writer.submit(_call, [fn], only, checks_first=checks_first,
                                              keeps_memory=keeps_memory)
        return result

    def state_view(self, conn: sqlite3.Connection) -> WriteView:
        """The rules' ``StateView`` over ``conn``, inside a write transaction of this storage."""
        return admission.state_view(conn, self.ledger)

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        return await self.submit(cand, dry_run)

    def submit(self, cand: Candidate, dry_run: bool = False) -> asyncio.Future[Admitted | DryRun]:
        """``admit`` without a coroutine: the future resolves once the admission is durable
        (used by ``writer_service``, which answers many requests per connection)."""
        return self._writer.submit(
            lambda conn, c: admission.admit(conn, self.ledger, c, dry_run), [cand], only,
            checks_first=True, revisions=(cand.record.id,), appends=True)

    async def admit_many(
        self, cands: Sequence[Candidate], dry_run: bool = False,
    ) -> list[Admitted | DryRun | Exception]:
        """The bulk path (loaders, ``POST /api/entries/batch``): each candidate exactly as
        ``admit`` would, in order, all in one write transaction, as one job of the writer
        whose items are the candidates (checks first; see ``store/writer.py``)."""
        return await self.submit_many(cands, dry_run)

    def submit_many(
        self, cands: Sequence[Candidate], dry_run: bool = False,
    ) -> asyncio.Future[list[Admitted | DryRun | Exception]]:
        """``admit_many`` without a coroutine (``writer_service``): one job, one future."""
        return self._writer.submit(
            lambda conn, c: admission.admit(conn, self.ledger, c, dry_run), cands, _outcomes,
            checks_first=True, revisions=tuple(c.record.id for c in cands), appends=True)

    async def admit_authority(self, document: Any) -> AuthorityAdmitted:
        """Every stateless check, the signatures' verification included, runs here, off the
        event loop and before the writer (``authority.prepare_authority_document``); the
        writer only asks the ledger (``admission.admit_authority``)."""
        prepared = await asyncio.to_thread(prepare_authority_document, document, self.genesis)
        result: AuthorityAdmitted = await self._writer.submit(
            lambda conn, p: admission.admit_authority(conn, self.ledger, p), [prepared], only,
            appends=True)
        return result

    async def replay(self, entries: Sequence[Replayed]) -> tuple[int, Exception | None]:
        """Append ``entries`` (the next ones of another copy of this log) at their recorded
        sequences and admission times, through the same code as an admission
        (``admission.replay_one``).  Stops at the first entry the rules refuse and returns how
        many were stored (they are committed) and that refusal; a failure that is not the
        entry's is raised.  Not refused on a log behind its published checkpoint: catching up
        is how such a log gets there."""
        return await self._writer.submit(
            lambda conn, e: admission.replay_one(conn, self.ledger, e), entries, _replayed,
            checks_first=True, stops=True,
            revisions=tuple(e.candidate.record.id for e in entries if e.candidate is not None))

    async def store_checkpoint(self, size: int, root: bytes, note: str, key: str,
                               received_at: str) -> None:
        """Keep a checkpoint signed elsewhere (a mirror's origin) whose root the caller has
        verified; checked again here against the tree, inside the write transaction."""

        def run(conn: sqlite3.Connection) -> None:
            latest = conn.execute("SELECT max(size) FROM checkpoints").fetchone()[0] or 0
            if size <= latest:
                return
            if size > tree_size(conn) or merkle.root_hash(size, node_reader(conn)) != root:
                raise Failed(f"checkpoint {size} is not the root of the stored tree",
                             "LOG_INCONSISTENT")
            conn.execute(
                "INSERT INTO checkpoints(size, root, note, key, signed_at) VALUES (?, ?, ?, ?, ?)",
                (size, root, note, key, received_at),
            )

        await self.write(run)

    async def key_authorities(
        self, key: str, upto: int
    ) -> tuple[list[tuple[int, AuthorityCertificate]], bool]:
        """A key's authority certificates admitted among the first ``upto`` leaves (oldest
        first) and whether root revoked it among them: who may sign a checkpoint of that
        size."""

        def read(conn: sqlite3.Connection) -> tuple[list[tuple[int, bytes]], bool]:
            certs = conn.execute("SELECT sequence, document FROM authorities WHERE key = ?"
                                 " AND sequence <= ? ORDER BY sequence", (key, upto)).fetchall()
            revoked = conn.execute("SELECT 1 FROM revocations WHERE key = ? AND issuer = 'root'"
                                   " AND sequence <= ?", (key, upto)).fetchone() is not None
            return [(int(s), bytes(d)) for s, d in certs], revoked

        rows, revoked = await self.read(read)
        return [(s, AuthorityCertificate.from_document(orjson.loads(d), self.genesis))
                for s, d in rows], revoked

    async def authority_keys(self, upto: int) -> list[str]:
        """Keys certified among the first ``upto`` leaves (who may sign a checkpoint)."""
        return await self.read(lambda conn: [str(k) for (k,) in conn.execute(
            "SELECT DISTINCT key FROM authorities WHERE sequence <= ?", (upto,))])

    async def tail(self) -> tuple[int, str]:
        """The log size and the last leaf's ``admitted_at`` ('' when empty), as committed."""
        def read(conn: sqlite3.Connection) -> tuple[int, str]:
            row = conn.execute("SELECT sequence, admitted_at FROM log ORDER BY sequence DESC"
                               " LIMIT 1").fetchone()
            return (0, "") if row is None else (int(row[0]), str(row[1]))

        return await self.read(read)

    async def admitted_ms(self, sequence: int) -> int:
        """When leaf ``sequence`` was admitted (ms)."""
        row = await self.read(lambda conn: conn.execute(
            "SELECT admitted_at FROM log WHERE sequence = ?", (sequence,)).fetchone())
        ms = parse_ms(row[0]) if row is not None else None
        if ms is None:
            raise Failed(f"leaf {sequence} is missing", "LOG_CORRUPT")
        return ms

    async def root_at(self, size: int) -> bytes:
        return await self.read(
            lambda conn: read_together(conn, lambda get: merkle.root_hash(size, get)))

    # --- reads -------------------------------------------------------------------------------

    async def authority_documents(self) -> list[dict[str, Any]]:
        rows = await self.read(lambda conn: conn.execute(
            "SELECT sequence, type, admitted_at, leaf FROM log"
            " WHERE type != 'contribution' ORDER BY sequence"
        ).fetchall())
        return [
            {"sequence": s, "type": t, "admitted_at": a,
             "document": orjson.loads(document_of(bytes(leaf)))}
            for s, t, a, leaf in rows
        ]

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a synchronous read function on one of the backend's read connections, on its
        thread; it sees committed state only and is stopped past ``query_timeout_s``."""
        return await self.backend.read(fn, self.query_timeout_s)

    def read_ahead(self, what: str, sequences: Sequence[Key]) -> None:
        self.backend.read_ahead(what, sequences)

    def signed(self, conn: sqlite3.Connection, sequence: int) -> bytes | None:
        return self.records.signed(conn, sequence)

    def signed_many(self, conn: sqlite3.Connection, sequences: Sequence[int]) -> list[bytes]:
        return self.records.signed_many(conn, sequences)

    async def entry(self, rev: str) -> bytes | None:
        return await self.read(lambda conn: self.records.entry(conn, rev))

    async def head_entry(self, rev: str) -> bytes | None:
        return await self.read(lambda conn: self.records.head_entry(conn, rev))

    async def log_size(self) -> int:
        return await self.read(tree_size)


def _call(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    return fn(conn)


def _outcomes(outcomes: list[Any]) -> list[Any]:
    return outcomes


def _replayed(outcomes: list[Any]) -> tuple[int, Exception | None]:
    """A replay's answer: the entries stored and the refusal it stopped at; a failure that is
    not a refusal (a ``Failed``, a bug) is raised."""
    last = outcomes[-1] if outcomes else None
    if not isinstance(last, BaseException):
        return len(outcomes), None
    if not isinstance(last, Refused):
        raise last
    return len(outcomes) - 1, last


PROBE_BYTES = 16_384


def _probe(conn: sqlite3.Connection) -> None:
    """``probe_write``'s transaction: pages written to the log (a row larger than a page,
    so SQLite writes overflow pages), nothing left behind."""
    conn.execute("INSERT INTO meta(key, value) VALUES ('storage_probe', ?)",
                 (secrets.token_hex(PROBE_BYTES // 2),))
    conn.execute("DELETE FROM meta WHERE key = 'storage_probe'")

