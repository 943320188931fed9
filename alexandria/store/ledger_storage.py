"""The ledger's storage, whatever the database: the group-commit writer and the admission
transaction, written once for every backend.

Writes go through one writer thread per process that commits whatever is queued together in
one write transaction (group commit).  An admission raises its refusals before it writes
anything, so it runs without a savepoint (``_Job.checks_first``); every other job (authority
documents, personal lists, checkpoints) runs inside its own savepoint, so that its refusal
undoes only itself.  Every state check runs inside that transaction, so with several server
processes on one database the checks and the insert are atomic: exactly one of two concurrent
revisions of the same head wins.  A job's future is resolved only after its transaction is
durable.

The admission itself (the rules' ``StateView`` over the write transaction, the leaf, its Merkle
nodes and every projection), authority documents, the replay of another copy of the log,
checkpoints and the assembly of signed records are functions of a connection offering the part
of ``sqlite3.Connection`` both backends provide (docs/architecture.md, "a storage backend").
A backend (``store/sqlite.py``, ``store/postgresql/storage.py``) says only how it connects,
begins a write transaction and reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import secrets
import sqlite3
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.leaf import LEAF_FORMAT, document_of, leaf_bytes, record_sql
from alexandria.core.records import admission_bytes, signed_record_bytes
from alexandria.core.timestamps import format_ms, now_ms, parse_ms
from alexandria.core.trust import AuthorityCertificate, Genesis, document_name
from alexandria.errors import AlexandriaError, Failed, Malformed, Refused
from alexandria.rules.admission import Candidate, decide
from alexandria.rules.authority import (
    AuthorityDocument,
    decide_authority_document,
    prepare_authority_document,
)
from alexandria.rules.state import FEED_RELATIONS
from alexandria.rules.view import ObjectFacts, Retry, RevisionFacts, Verdict, object_after
from alexandria.store import feed, log_floor, schema, search_index
from alexandria.store.interface import Admitted, AuthorityAdmitted, DryRun, Replayed, Storage
from alexandria.store.merkle_nodes import node_reader, read_together, tree_size
from alexandria.store.outage import Outages, classify, outage_of
from alexandria.store.read_ahead import Key
from alexandria.store.writer_memory import WriterMemory

T = TypeVar("T")
BATCH_LIMIT = 256

class _StateView:
    """``rules.view.StateView`` over the writer's connection, inside its transaction."""

    def __init__(self, conn: sqlite3.Connection, authority_cache: dict[int, AuthorityCertificate],
                 genesis: Genesis, memory: WriterMemory) -> None:
        self.conn = conn
        self.cache = authority_cache
        self.genesis = genesis
        self.memory = memory

    def admitted(self, rev: str) -> int | None:
        if rev in self.memory.absent:  # known not admitted when this transaction began
            return None
        row = self.conn.execute(f"SELECT sequence FROM revisions WHERE {schema.revision_id('?')}",
                                (rev, rev)).fetchone()
        return None if row is None else int(row[0])

    def document_admitted(self, kind: str, key: str, document: bytes) -> int | None:
        # a leaf commits to its admission time, so its hash cannot find a re-posted document:
        # the documents about ``key`` are few, and each leaf's document is compared
        table = "authorities" if kind == "certificate" else "revocations"
        for sequence, leaf in self.conn.execute(
            f"SELECT t.sequence, l.leaf FROM {table} t JOIN log l ON l.sequence = t.sequence"
            " WHERE t.key = ?", (key,),
        ):
            if document_of(bytes(leaf)) == document:
                return int(sequence)
        return None

    def revision(self, rev: str) -> RevisionFacts | None:
        found: RevisionFacts | None = self.memory.cached(
            self.memory.revisions, rev, lambda: self._revision(rev)
        )
        return found

    def _revision(self, rev: str) -> RevisionFacts | None:
        row = self.conn.execute(
            "SELECT sequence, root, kind, author, authored_at, record_length FROM revisions"
            f" WHERE {schema.revision_id('?')}",
            (rev, rev),
        ).fetchone()
        if row is None:
            return None
        sequence, length = row[0], row[5]
        ms = parse_ms(row[4])
        assert ms is not None
        self.memory.feed.seqs[rev] = int(sequence)  # the links to it store its sequence

        def record() -> dict[str, Any]:
            data = self.conn.execute(
                f"SELECT {record_sql()} FROM log WHERE sequence = ?", (length, sequence)
            ).fetchone()[0]
            value: dict[str, Any] = orjson.loads(data)
            return value

        return RevisionFacts(rev, row[1], row[2], row[3], ms, record)

    def object(self, root: str) -> ObjectFacts | None:
        found: ObjectFacts | None = self.memory.cached(
            self.memory.objects, root, lambda: self._object(root)
        )
        return found

    def _object(self, root: str) -> ObjectFacts | None:
        row = self.conn.execute(
            "SELECT root, kind, author, head, depth, feed_links FROM objects"
            f" WHERE {schema.object_row('?')}",
            (root, root),
        ).fetchone()
        if row is None:
            return None
        return ObjectFacts(
            row[0], row[1], row[2], row[3], row[4],
            tuple((a, b) for a, b in orjson.loads(row[5])),
        )

    def vote_of(self, author: str, target_root: str) -> ObjectFacts | None:
        row = self.conn.execute(
            "SELECT vote_root FROM votes WHERE author = ? AND target = ?", (author, target_root)
        ).fetchone()
        return None if row is None else self.object(row[0])

    def authorities(self, key: str) -> Sequence[tuple[int, AuthorityCertificate]]:
        found: list[tuple[int, AuthorityCertificate]] = self.memory.cached(
            self.memory.authorities, key, lambda: self._authorities(key)
        )
        return found

    def _authorities(self, key: str) -> list[tuple[int, AuthorityCertificate]]:
        out = []
        for seq, doc in self.conn.execute(
            "SELECT sequence, document FROM authorities WHERE key = ? ORDER BY sequence", (key,)
        ):
            cert = self.cache.get(seq)
            if cert is None:
                cert = AuthorityCertificate.from_document(orjson.loads(doc), self.genesis)
                self.cache[seq] = cert
            out.append((seq, cert))
        return out

    def revoked(self, key: str, issuer: str | None) -> bool:
        by = issuer or "root"
        found: bool = self.memory.cached(
            self.memory.revoked, (key, by), lambda: self.conn.execute(
                "SELECT 1 FROM revocations WHERE key = ? AND (issuer = 'root' OR issuer = ?)",
                (key, by),
            ).fetchone() is not None,
        )
        return found


@dataclass
class _Job:
    """``checks_first``: ``fn`` raises its refusals (``Refused``) before it writes anything, so
    it needs no savepoint; any other failure of such a job aborts the whole batch (nothing in it
    was acknowledged, so nothing is lost)."""

    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    checks_first: bool = False
    #: the revision ids ``fn`` will ask ``StateView.admitted`` about (``_absent``)
    revisions: tuple[str, ...] = ()
    #: ``fn`` appends admissions to the log: refused on a log that is behind or forked
    appends: bool = False


class _BatchAborted(Exception):
    """The write transaction was rolled back; ``__cause__`` says why."""


log = logging.getLogger(__name__)
BUSY_TIMEOUT_S = 30.0
SIGNED_CHUNK = 500  # signed records read by one statement (signed_many)
READERS = 4  # read connections, one thread each: SQLite releases the GIL while it reads


class LedgerStorage(Storage):
    """A library's storage: the writer thread and everything it writes, the admission code and
    the assembly of signed records.  A backend implements the hooks below and nothing else:

    - ``_connect_writer`` (the write connection, its schema brought up to date) and
      ``_begin`` (a write transaction that no other writer, in any process, runs beside);
    - ``_open_readers``, ``read`` and ``_close_readers`` (the read connections, each read
      stopped past ``query_timeout_s``);
    - optionally ``_before_commit`` (the transaction's last writes, e.g. SQLite's move of recent
      feed rows), ``_committed`` and ``_between_batches`` (work after a commit, e.g. SQLite's
      WAL checkpoints), ``_try_batch`` (how a batch's first attempt is sent) and ``read_ahead``;
    - its ``WriterMemory``, whose ``begin`` tells the writer when another connection wrote.
    """

    def __init__(self, path: str | Path, genesis: Genesis,
                 memory: WriterMemory | None = None) -> None:
        self.path = str(path)  # names the library in messages: never holds a password
        self.genesis = genesis
        self._writer_conn: sqlite3.Connection | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._writing: asyncio.Future[None] | None = None  # resolved when the writer thread ends
        self._authority_cache: dict[int, AuthorityCertificate] = {}
        self._authority_bytes: dict[int, bytes] = {}
        self._memory = memory if memory is not None else WriterMemory()
        self.clock: Callable[[], int] = now_ms
        #: each read's time budget in seconds, None for none (``store/query_budget.py``)
        self.query_timeout_s: float | None = None
        self._floor_checked = -1  # the memory generation ``_floor_problem`` was learnt in
        self._floor_problem: Failed | None = None
        #: the outages in progress (``store/outage.py``): what ``/healthz`` reports
        self.outages = Outages(self.path)

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        self._writer_conn = await asyncio.to_thread(self._connect_writer)
        await self.write(self._init_meta)
        await self.write(search_index.ensure)
        await self._open_readers()

    @abstractmethod
    def _connect_writer(self) -> sqlite3.Connection:
        """The write connection (run on a worker thread), its schema created or migrated."""

    @abstractmethod
    async def _open_readers(self) -> None:
        """Open the read connections, once the writer has initialised the database."""

    @abstractmethod
    async def _close_readers(self) -> None:
        """Close what ``_open_readers`` opened (and any other helper of the backend); called
        after the writer thread ended, before the write connection closes."""

    async def close(self) -> None:
        if self._writing is not None:
            self._jobs.put(None)  # after the jobs already queued
            with contextlib.suppress(Exception):
                await self._writing
            self._writing = None
        await self._close_readers()
        if self._writer_conn is not None:
            self._writer_conn.close()
            self._writer_conn = None

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
        return self._writer_conn is not None and (self._writing is None
                                                  or not self._writing.done())

    async def meta(self, key: str) -> str | None:
        row = await self.read(
            lambda conn: conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        )
        return None if row is None else str(row[0])

    def free_bytes(self) -> int | None:
        """Bytes free for this process on the file system holding the database, or None
        where the storage cannot tell (a database server's disk)."""
        return None

    async def probe_write(self) -> None:
        """A write transaction that needs room on the disk, through the writer as any write:
        a row of ``PROBE_BYTES`` stored and removed again.  While writes fail
        (``outages``), the library's probe (``Library.monitoring``) runs it to learn when
        they work again; it raises what an admission would."""
        await self.write(_probe, checks_first=True)

    # --- the writer --------------------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T], checks_first: bool = False) -> T:
        """Run ``fn`` inside the next group-commit write transaction (its own savepoint) and
        return its result once the transaction is durable.  An exception rolls back ``fn``'s
        writes only and is raised here."""
        return await self._enqueue(fn, checks_first)

    def _enqueue(
        self, fn: Callable[[sqlite3.Connection], T], checks_first: bool,
        revisions: tuple[str, ...] = (), appends: bool = False,
    ) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        if self._writing is None:
            conn = self._writer_conn
            assert conn is not None, "storage is not open"
            # the writer thread holds the write connection until close()
            self._writing = loop.create_future()
            threading.Thread(
                target=self._write_forever, args=(conn, loop, self._writing),
                name="alexandria-writer", daemon=True,
            ).start()
        fut: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(fn, fut, checks_first, revisions, appends))
        return fut

    def _write_forever(
        self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop,
        ended: asyncio.Future[None],
    ) -> None:
        """The writer thread: take everything queued, run it as one batch, hand the results to
        the event loop, and go straight on with whatever queued meanwhile (no round trip
        through the event loop between two batches)."""
        try:
            self._write_batches(conn, loop)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed first
                loop.call_soon_threadsafe(_settle, ended)

    def _write_batches(self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            first = self._jobs.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < BATCH_LIMIT:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                batch.append(job)
            try:
                results = self._run_batch(conn, batch)
            except Exception as exc:  # the connection itself failed
                results = [self._failed(exc)] * len(batch)
            loop.call_soon_threadsafe(self._resolve, batch, results)
            self._between_batches(conn)  # after the answers
            if stop:
                return

    @staticmethod
    def _resolve(batch: list[_Job], results: list[Any]) -> None:
        for job, res in zip(batch, results, strict=True):
            if job.future.done():
                continue
            if isinstance(res, BaseException):
                job.future.set_exception(res)
            else:
                job.future.set_result(res)

    @abstractmethod
    def _begin(self, conn: sqlite3.Connection) -> None:
        """Begin the write transaction of a batch, once no other writer (of this database, in
        any process) holds one; ``sqlite3.Error`` if it cannot (the batch is 503
        ``STORAGE_BUSY``)."""

    def _absent(self, conn: sqlite3.Connection, batch: list[_Job]) -> set[str]:
        """Which of the revision ids the batch's jobs will ask about (``_Job.revisions``) are
        not admitted, learnt at the start of the transaction, under the write lock, so that
        ``StateView.admitted`` need not ask the database for each.  A backend where each
        question costs a round trip answers them all with one statement
        (``PostgresStorage._absent``); the default learns nothing."""
        return set()

    def _before_commit(self, conn: sqlite3.Connection) -> None:
        """At the end of each batch's transaction, before its ``COMMIT``."""

    def _committed(self, conn: sqlite3.Connection) -> None:
        """After each batch's ``COMMIT`` (on the writer thread, before the answers)."""

    def _between_batches(self, conn: sqlite3.Connection) -> None:
        """After a batch's answers were handed over, before the next batch begins."""

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> list[Any]:
        """One write transaction for ``batch``; one result (or exception) per job.

        A ``checks_first`` job that fails in a way it did not plan for (a bug, an input some
        check missed) may have written part of its rows, so the transaction is rolled back;
        the batch then runs once more with every job in its own savepoint, so that job fails
        alone and every other job is answered as if it had never been there (nothing in the
        batch had been acknowledged)."""
        try:
            results = self._try_batch(conn, batch, isolate=False)
        except _BatchAborted as exc:
            if outage_of(exc.__cause__) is not None:  # the same outage would fail the rerun
                return [self._failed(exc.__cause__)] * len(batch)
            try:
                results = self._try_batch(conn, batch, isolate=True)
            except _BatchAborted as again:
                return [self._failed(again.__cause__)] * len(batch)
        return results

    def _failed(self, cause: BaseException | None) -> Failed:
        """What a client hears when a write transaction failed (``outage.classify``); the
        cause goes to the log once per episode (``outage.Outages``), not to them."""
        error = classify(cause)
        self.outages.failed("writes", error, cause)
        return error

    def _try_batch(self, conn: sqlite3.Connection, batch: list[_Job], isolate: bool) -> list[Any]:
        results: list[Any] = []
        replaced = self.replaced()
        if replaced is not None:
            return [replaced] * len(batch)
        try:
            self._begin(conn)
        except Failed as exc:  # e.g. a reconnect that may not take its lock
            return [exc] * len(batch)
        except sqlite3.Error as exc:
            if outage_of(exc) is not None:
                return [self._failed(exc)] * len(batch)
            log.warning("database is busy: %s", exc)
            return [Failed("database is busy", "STORAGE_BUSY")] * len(batch)
        try:
            self._memory.begin(conn)
            refusal = self._log_refusal(conn) if any(j.appends for j in batch) else None
            self._memory.absent = self._absent(conn, batch)
            for job in batch:
                if refusal is not None and job.appends:
                    results.append(refusal)
                    continue
                if job.checks_first and not isolate:
                    try:
                        results.append(job.fn(conn))
                    except Refused as exc:
                        results.append(exc)
                    except Exception as exc:
                        raise _BatchAborted() from exc
                    continue
                conn.execute("SAVEPOINT job")
                try:
                    results.append(job.fn(conn))
                    conn.execute("RELEASE job")
                except Exception as exc:
                    if outage_of(exc) is not None:  # not this job's failure: the batch's
                        raise _BatchAborted() from exc
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    if not isinstance(exc, AlexandriaError):
                        log.error("a write failed unexpectedly", exc_info=exc)
                    results.append(exc)
                # any other write (authority documents, personal lists, checkpoints, an index
                # rebuild) may have changed what the memory holds, or been rolled back
                self._memory.forget()
            self._before_commit(conn)
            conn.execute("COMMIT")
            self._memory.absent = set()
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise _BatchAborted() from exc
        except _BatchAborted:
            self._rollback(conn)
            raise
        self._committed(conn)
        self.outages.ok("writes")
        return results

    def _log_refusal(self, conn: sqlite3.Connection) -> Failed | None:
        """Why no admission may be appended to the log in ``conn`` now: it is behind or a fork
        of the largest checkpoint published (``store/log_floor.py``).  Looked up again whenever
        the writer's memory was forgotten — another connection committed (``data_version``;
        on PostgreSQL, another node wrote), a reconnect, a rollback — else remembered while
        all is well."""
        generation = self._memory.generation
        # while refused, every batch looks again: a replay in this process may have caught up
        if self._floor_checked != generation or self._floor_problem is not None:
            size = self._memory.tail(conn)[0]
            self._floor_problem = log_floor.log_problem(conn, log_floor.read_floor(conn), size)
            self._floor_checked = generation
        return self._floor_problem

    def replaced(self) -> Failed | None:
        """Why this node's database is no longer the one it opened (a SQLite file replaced
        behind its back), or None."""
        return None

    def _rollback(self, conn: sqlite3.Connection) -> None:
        self._memory.forget()
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")

    # --- admission ---------------------------------------------------------------------------

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        return await self.submit(cand, dry_run)

    def submit(self, cand: Candidate, dry_run: bool = False) -> asyncio.Future[Admitted | DryRun]:
        """``admit`` without a coroutine: the future resolves once the admission is durable
        (used by ``writer_service``, which answers many requests per connection)."""
        return self._enqueue(lambda conn: self._admit(conn, cand, dry_run), checks_first=True,
                             revisions=(cand.record.id,), appends=True)

    async def admit_many(
        self, cands: Sequence[Candidate], dry_run: bool = False,
    ) -> list[Admitted | DryRun | Exception]:
        """The bulk path (loaders, ``POST /api/entries/batch``): each candidate exactly as
        ``admit`` would, in order, all in one write transaction.

        As in a batch of ``admit`` calls, a refusal is raised before the admission writes
        anything, so the bulk runs as a ``checks_first`` job, in no savepoint at all: a
        savepoint copies every page it is the first to change into SQLite's sub-journal, a
        temporary file — one savepoint per candidate would copy the pages every admission
        changes (the log's tail, the Merkle nodes, the catalogue) once per candidate, the
        largest single cost of a bulk load.  An admission failing in a way it did not
        plan for (a bug) may have written part of its rows: the writer then rolls the batch
        back and runs it again with each job in its own savepoint, and this job, run a second
        time, gives each candidate a savepoint of its own, so that candidate fails alone.  (The
        failure may surface after the job returned: PostgreSQL's pipeline reports a statement's
        error at the next read or at the commit.)"""
        return await self.submit_many(cands, dry_run)

    def submit_many(
        self, cands: Sequence[Candidate], dry_run: bool = False,
    ) -> asyncio.Future[list[Admitted | DryRun | Exception]]:
        """``admit_many`` without a coroutine (``writer_service``): one job, one future."""
        runs: list[None] = []

        def run(conn: sqlite3.Connection) -> list[Admitted | DryRun | Exception]:
            rerun = bool(runs)  # the first run's transaction was rolled back
            runs.append(None)
            out: list[Admitted | DryRun | Exception] = []
            for cand in cands:
                if not rerun:
                    try:
                        out.append(self._admit(conn, cand, dry_run))
                    except Refused as exc:
                        out.append(exc)  # refused before writing
                    continue
                conn.execute("SAVEPOINT bulk")
                try:
                    out.append(self._admit(conn, cand, dry_run))
                except Exception as exc:
                    conn.execute("ROLLBACK TO bulk")
                    self._memory.forget()
                    out.append(exc)
                conn.execute("RELEASE bulk")
            return out

        return self._enqueue(run, checks_first=True,
                             revisions=tuple(c.record.id for c in cands), appends=True)

    def state_view(self, conn: sqlite3.Connection) -> _StateView:
        """The rules' ``StateView`` over ``conn``, inside a write transaction of this storage."""
        return _StateView(conn, self._authority_cache, self.genesis, self._memory)

    def _admit(self, conn: sqlite3.Connection, cand: Candidate, dry_run: bool) -> Admitted | DryRun:
        view = self.state_view(conn)
        now = self._admission_clock(conn)
        verdict = decide(view, cand, now)
        if isinstance(verdict, Retry):
            if dry_run:
                return DryRun(verdict.id, verdict.root, True)
            signed = self._signed_sync(conn, verdict.sequence)
            assert signed is not None
            return Admitted(False, verdict.id, verdict.root, verdict.sequence, signed)
        if dry_run:
            return DryRun(verdict.id, verdict.root, False)
        sequence, admitted_at = self._append_leaf(
            conn, "contribution", cand.document, now, _record_pieces(cand, verdict))
        self._store_contribution(conn, cand, verdict, sequence)
        authority = self._authority_document_bytes(conn, verdict.authority_sequence)
        admission = admission_bytes(sequence, admitted_at, authority)
        signed = signed_record_bytes(
            cand.document, cand.record_length, verdict.id, verdict.root, admission
        )
        return Admitted(True, verdict.id, verdict.root, sequence, signed, admission)

    def _admission_clock(self, conn: sqlite3.Connection) -> int:
        """The admission time: the server clock, but never before the last admission, so that
        ``admitted_at`` never decreases along the log.  The rules are checked at exactly the
        time that is recorded, so an offline replay at the recorded times reaches the same
        verdicts."""
        return max(self.clock(), self._memory.tail(conn)[1])

    def _append_leaf(
        self, conn: sqlite3.Connection, kind: str, document: bytes, now: int,
        record: tuple[str, str, int, int] | None = None,
    ) -> tuple[int, str]:
        """Append the leaf of ``document`` (its canonical bytes) admitted at ``now`` (from
        ``_admission_clock``): the leaf commits to the admission time (PROTOCOL §7).
        ``record``: a contribution's revision id, root, record length and authority sequence,
        stored beside its leaf (``schema.SIGNED_COLUMNS``)."""
        memory = self._memory
        sequence = memory.tail(conn)[0] + 1
        admitted_at = format_ms(now)
        leaf = leaf_bytes(admitted_at, document)
        leaf_hash = merkle.leaf_hash(leaf)
        conn.execute(
            "INSERT INTO log(sequence, type, leaf, leaf_hash, admitted_at, id, root,"
            " record_length, authority_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sequence, kind, leaf, leaf_hash, admitted_at, *(record or (None,) * 4)),
        )
        nodes = merkle.append_nodes(sequence - 1, leaf_hash, memory.node_getter(conn))
        conn.executemany(
            "INSERT INTO merkle_nodes(position, hash) VALUES (?, ?)",
            [(merkle.position(level, index), h) for level, index, h in nodes],
        )
        memory.appended(sequence, now, nodes)
        return sequence, admitted_at

    def _store_contribution(
        self, conn: sqlite3.Connection, cand: Candidate, v: Verdict, sequence: int
    ) -> None:
        rec = cand.record
        memory = self._memory
        cache = memory.feed
        placed: feed.Placement | None = None
        if v.previous:
            # an object's parentage never changes: its near ancestors and tree neither
            created = cache.seq_of(conn, v.root)
            near = cache.near_of(conn, created)
            tree = cache.node(conn, created).tree if v.kind in feed.CONVERSATION else 0
        else:
            placed = feed.place(conn, cache, v.kind, sequence, (
                (lk.relation, target_root)
                for lk, target_root in zip(rec.links, v.link_roots, strict=True)
                if lk.relation in FEED_RELATIONS
            ))
            near = placed.near
            tree = placed.node.tree if placed.node is not None else 0
        conn.execute(
            "INSERT INTO revisions(sequence, id, root, kind, author, authored_at, title,"
            " record_length, authority_seq, tree) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sequence, v.id, v.root, v.kind, v.author, rec.authored_at, rec.title,
             cand.record_length, v.authority_sequence, tree),
        )
        memory.absent.discard(v.id)
        cache.seqs[v.id] = sequence  # links to it store its sequence
        if placed is None:
            conn.execute(
                "UPDATE objects SET head = ?, head_sequence = ?, revisions = revisions + 1"
                f" WHERE {schema.object_row('?')}",
                (v.id, sequence, v.root, v.root),
            )
            cached = memory.objects.get(v.root)
            if cached is not None:
                memory.objects[v.root] = object_after(v, cached)
        else:
            parent = next((t for r, t in v.feed_links if r == "contained_in"), "")
            conn.execute(
                "INSERT INTO objects(root, kind, author, head, head_sequence, revisions, depth,"
                " parent, vote_target, feed_links, created_sequence, ancestors, tree, cdepth,"
                " cparent, jump) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (v.root, v.kind, v.author, v.id, sequence, v.depth, parent, v.vote_target,
                 orjson.dumps(v.feed_links).decode(), sequence, near.encode(),
                 *feed.position(placed.node)),
            )
            if v.vote_target:
                conn.execute(
                    "INSERT INTO votes(author, target, vote_root) VALUES (?, ?, ?)",
                    (v.author, v.vote_target, v.root),
                )
            cache.remember(v.root, sequence, near, placed.node)
            if placed.mark is not None:
                feed.mark_deep(conn, cache, placed.mark)
        feed.write_rows(conn, near, sequence)
        links = [
            (sequence, i, lk.relation, lk.target, cache.seq_of(conn, lk.target),
             cache.seq_of(conn, target_root))
            for i, (lk, target_root) in enumerate(zip(rec.links, v.link_roots, strict=True))
        ]
        conn.executemany(
            "INSERT INTO links(source_sequence, position, relation, target, target_seq,"
            " target_owner) VALUES (?, ?, ?, ?, ?, ?)", links,
        )
        # the object's tree links with its head (schema ``tree_heads``): a revision carries
        # its object's tree links unchanged (rules.state), so they name the rows to update
        tree_links = [(owner, relation) for _s, _i, relation, _t, _ts, owner in links
                      if relation in FEED_RELATIONS]
        if placed is not None:
            conn.executemany(
                "INSERT OR IGNORE INTO tree_heads(target_owner, relation, created_sequence,"
                " head_sequence) VALUES (?, ?, ?, ?)",
                [(owner, relation, sequence, sequence) for owner, relation in tree_links],
            )
        else:
            conn.executemany(
                "UPDATE tree_heads SET head_sequence = ? WHERE target_owner = ?"
                " AND relation = ? AND created_sequence = ?",
                [(sequence, owner, relation, created) for owner, relation in tree_links],
            )
        search_index.on_admitted(conn, rec, v, sequence, memory.actors, cand.index_text)

    # --- authority documents -----------------------------------------------------------------

    async def admit_authority(self, document: Any) -> AuthorityAdmitted:
        """Every stateless check, the signatures' verification included, runs here, off the
        event loop and before the writer (``authority.prepare_authority_document``); the
        writer only asks the ledger (``_admit_authority``)."""
        prepared = await asyncio.to_thread(prepare_authority_document, document, self.genesis)
        return await self._enqueue(lambda conn: self._admit_authority(conn, prepared),
                                   checks_first=False, appends=True)

    def _admit_authority(
        self, conn: sqlite3.Connection, prepared: AuthorityDocument, now: int | None = None
    ) -> AuthorityAdmitted:
        """The rules' verdict (``authority.decide_authority_document``), then the leaf and the
        row the rules will ask about later.  ``now``: the admission time (a replay passes the
        recorded one)."""
        if now is None:
            now = self._admission_clock(conn)
        v = decide_authority_document(self.state_view(conn), prepared, self.genesis, now)
        if v.retry_of is not None:
            row = conn.execute(
                "SELECT admitted_at FROM log WHERE sequence = ?", (v.retry_of,)
            ).fetchone()
            return AuthorityAdmitted(False, v.retry_of, row[0], orjson.loads(v.data))
        sequence, admitted_at = self._append_leaf(conn, v.type, v.data, now)
        if v.certificate is not None:
            cert = v.certificate
            conn.execute(
                "INSERT INTO authorities(sequence, key, roles, document) VALUES (?, ?, ?, ?)",
                (sequence, cert.key, json.dumps(list(cert.roles)), v.data),
            )
            self._authority_cache[sequence] = cert
            self._memory.authorities.clear()
        else:
            assert v.revocation is not None
            conn.execute(
                "INSERT INTO revocations(sequence, key, issuer) VALUES (?, ?, ?)",
                (sequence, v.revocation.key, v.revocation.signer),
            )
            self._memory.revoked.clear()
        return AuthorityAdmitted(True, sequence, admitted_at, dict(v.document))

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

    # --- replaying another copy of the log -----------------------------------------------------

    async def replay(self, entries: Sequence[Replayed]) -> tuple[int, Exception | None]:
        """Append ``entries`` (the next ones of another copy of this log) at their recorded
        sequences and admission times, through the same code as an admission: the rules
        (``admission.decide``, at the recorded time), the leaf and its Merkle nodes, every
        projection.  Stops at the first entry that does not hold and returns how many were
        stored (they are committed) and why it stopped."""

        def run(conn: sqlite3.Connection) -> tuple[int, Exception | None]:
            # like an admission, an entry raises its refusal before it writes anything (so no
            # savepoint); a failure while writing aborts the whole batch, nothing committed
            done = 0
            for entry in entries:
                try:
                    self._replay_one(conn, entry)
                except Refused as exc:
                    return done, exc
                done += 1
            return done, None

        return await self._enqueue(run, checks_first=True, revisions=tuple(
            e.candidate.record.id for e in entries if e.candidate is not None))

    def _replay_one(self, conn: sqlite3.Connection, e: Replayed) -> None:
        size, last_ms = self._memory.tail(conn)
        if e.sequence != size + 1:
            raise Failed(f"entry {e.sequence} does not follow the log's {size} leaves",
                         "REPLAY_OUT_OF_ORDER", sequence=e.sequence, tree_size=size)
        if e.admitted_ms < last_ms:
            raise Failed("admitted_at is before the previous entry's", "ADMITTED_AT_ORDER")
        if e.candidate is not None:
            cand = e.candidate
            if e.kind != "contribution":
                raise Malformed(f"a contribution recorded as a {e.kind}", "TYPE_MISMATCH")
            verdict = decide(self.state_view(conn), cand, e.admitted_ms)
            if isinstance(verdict, Retry):  # the server answers a retry without a new leaf
                raise Malformed("the same contribution was already admitted",
                                "DUPLICATE_ENTRY", first=verdict.sequence)
            sequence, _ = self._append_leaf(conn, "contribution", cand.document, e.admitted_ms,
                                            _record_pieces(cand, verdict))
            self._store_contribution(conn, cand, verdict, sequence)
            return
        name = document_name(e.document)
        if name != e.kind:
            raise Malformed(f"a {name} recorded as a {e.kind}", "TYPE_MISMATCH")
        prepared = prepare_authority_document(e.document, self.genesis)
        result = self._admit_authority(conn, prepared, e.admitted_ms)
        if not result.created:
            raise Malformed(f"the same document was already admitted at {result.sequence}",
                            "DUPLICATE_ENTRY")

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

    def _authority_document_bytes(self, conn: sqlite3.Connection, seq: int) -> bytes:
        data = self._authority_bytes.get(seq)
        if data is None:
            row = conn.execute(
                "SELECT document FROM authorities WHERE sequence = ?", (seq,)
            ).fetchone()
            if row is None:
                raise Failed(f"authority certificate {seq} is missing", "LOG_CORRUPT")
            data = self._authority_bytes[seq] = bytes(row[0])
        return data

    def _assemble(self, conn: sqlite3.Connection, row: Sequence[Any]) -> bytes:
        rev_id, root, seq, rlen, aseq, leaf, admitted_at = row
        adm = admission_bytes(seq, admitted_at, self._authority_document_bytes(conn, aseq))
        return signed_record_bytes(document_of(bytes(leaf)), rlen, rev_id, root, adm)

    def _signed_sync(self, conn: sqlite3.Connection, sequence: int) -> bytes | None:
        row = conn.execute(schema.signed_sql("l.sequence = ?"), (sequence,)).fetchone()
        return None if row is None else self._assemble(conn, row)

    @abstractmethod
    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a synchronous read function on one of the read connections, on its thread;
        it sees committed state only."""

    def read_ahead(self, what: str, sequences: Sequence[Key]) -> None:
        """Bring the pages of the rows ``what`` at ``sequences`` into memory several at once,
        before a read connection reads them one by one (``SqliteStorage.read_ahead``); a
        backend that does not need it does nothing."""

    def _fetch_ahead(self, sql: str, keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """The rows ``sql`` selects for ``keys`` (its one parameter), read several at once
        beside the read connection (``ReadAhead.fetch``): only for rows that never change once
        written.  A key left out is read by the caller; a backend without it returns none."""
        return {}

    def _kept_ahead(self, sequences: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """The rows of ``schema.signed_sql`` at ``sequences`` that this thread's read-ahead already
        read (``ReadAhead.kept``), by sequence; a backend without it returns none."""
        return {}

    def signed_many(self, conn: sqlite3.Connection, sequences: Sequence[int]) -> list[bytes]:
        """Signed records for the given revision sequences, in the given order (a sequence
        with no revision is left out).  One statement per ``SIGNED_CHUNK`` records: on
        PostgreSQL each statement is a round trip to the server."""
        wanted = list(dict.fromkeys(sequences))
        # a revision and its leaf never change once admitted: rows read ahead, several at once,
        # are the ones this snapshot holds (callers pass sequences found in ``conn``'s snapshot,
        # and later snapshots only add rows) -- those a read-ahead of the page kept, then the
        # rest fetched together
        found: dict[int, Sequence[Any]] = dict(self._kept_ahead(wanted))
        wanted = [seq for seq in wanted if seq not in found]
        found.update(self._fetch_ahead(schema.signed_sql("l.sequence = ?"), wanted))
        wanted = [seq for seq in wanted if seq not in found]
        for i in range(0, len(wanted), SIGNED_CHUNK):
            chunk = wanted[i:i + SIGNED_CHUNK]
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(schema.signed_sql(f"l.sequence IN ({marks})"), chunk):
                found[int(row[2])] = row
        return [self._assemble(conn, found[seq]) for seq in sequences if seq in found]

    async def entry(self, rev: str) -> bytes | None:
        def fn(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(schema.signed_sql(
                f"l.sequence = (SELECT sequence FROM revisions WHERE {schema.revision_id('?')})"
            ), (rev, rev)).fetchone()
            return None if row is None else self._assemble(conn, row)

        return await self.read(fn)

    async def head_entry(self, rev: str) -> bytes | None:
        def fn(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT o.head_sequence FROM revisions r JOIN revisions f"
                f" ON {schema.revision_id('r.root', 'f.id')}"
                " JOIN objects o ON o.created_sequence = f.sequence"
                f" WHERE {schema.revision_id('?', 'r.id')}", (rev, rev),
            ).fetchone()
            return None if row is None else self._signed_sync(conn, row[0])

        return await self.read(fn)

    async def log_size(self) -> int:
        return await self.read(tree_size)


def _record_pieces(cand: Candidate, verdict: Verdict) -> tuple[str, str, int, int]:
    """What a contribution's ``log`` row carries beside its leaf (``schema.SIGNED_COLUMNS``)."""
    return verdict.id, verdict.root, cand.record_length, verdict.authority_sequence


PROBE_BYTES = 16_384


def _probe(conn: sqlite3.Connection) -> None:
    """``probe_write``'s transaction: pages written to the log (a row larger than a page,
    so SQLite writes overflow pages), nothing left behind."""
    conn.execute("INSERT INTO meta(key, value) VALUES ('storage_probe', ?)",
                 (secrets.token_hex(PROBE_BYTES // 2),))
    conn.execute("DELETE FROM meta WHERE key = 'storage_probe'")


def _settle(ended: asyncio.Future[None]) -> None:
    if not ended.done():
        ended.set_result(None)
