"""SQLite storage: one database file in WAL mode, driven through aiosqlite.

Writes go through one writer task per process that commits whatever is queued together in one
``BEGIN IMMEDIATE`` transaction (group commit), each job inside its own savepoint so that one
refusal never undoes another admission.  Every state check runs inside that transaction, so
with several server processes on one database the checks and the insert are atomic: exactly
one of two concurrent revisions of the same head wins.  ``synchronous=FULL``: a job's future is
resolved only after its transaction is durable.

Reads use a separate connection and see committed state only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import secrets
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import orjson

from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.records import admission_bytes, signed_record_bytes
from alexandria.core.timestamps import format_ms, now_ms, parse_ms
from alexandria.core.trust import AuthorityCertificate, Genesis
from alexandria.errors import AlexandriaError, ServiceError
from alexandria.reads.log import SCHEMA as LOG_SCHEMA
from alexandria.rules.admission import Candidate, decide
from alexandria.rules.authority import check_authority_document
from alexandria.rules.view import ObjectFacts, Retry, RevisionFacts, Verdict, object_after
from alexandria.store import search_index
from alexandria.store.interface import Admitted, AuthorityAdmitted, DryRun, Storage
from alexandria.store.personal import SCHEMA as PERSONAL_SCHEMA
from alexandria.store.wal_checkpointer import JOURNAL_SIZE_LIMIT, WalCheckpointer
from alexandria.store.writer_memory import WriterMemory

T = TypeVar("T")
BATCH_LIMIT = 256

# One row per object, in creation order: the rowid is the sequence of its first revision, so a
# new object appends to the table instead of splitting a page of rows keyed by a random root
# (the root index holds 64 hex characters and a rowid per entry).  ``ancestors``: the roots
# whose feeds include the object's (its feed parents and theirs), space-separated.
_OBJECTS = """
CREATE TABLE IF NOT EXISTS {name}(
    created_sequence INTEGER PRIMARY KEY,
    root TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    head TEXT NOT NULL,
    head_sequence INTEGER NOT NULL,
    revisions INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    parent TEXT NOT NULL,
    vote_target TEXT NOT NULL,
    feed_links TEXT NOT NULL,
    ancestors TEXT NOT NULL DEFAULT ''
);
"""
_OBJECT_INDEXES = """
CREATE INDEX IF NOT EXISTS objects_head_sequence ON objects(head_sequence);
DROP INDEX IF EXISTS objects_parent;  -- superseded by objects_contents
CREATE INDEX IF NOT EXISTS objects_contents ON objects(parent, kind, created_sequence)
    WHERE parent != '';
"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log(
    sequence INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    leaf BLOB NOT NULL,
    leaf_hash BLOB NOT NULL,
    admitted_at TEXT NOT NULL
);
-- authority documents are found again by their leaf hash; contributions by revision id, so
-- indexing their (random) leaf hashes too would only cost a B-tree page per admission
DROP INDEX IF EXISTS log_leaf_hash;
CREATE UNIQUE INDEX IF NOT EXISTS log_document_hash ON log(leaf_hash) WHERE type != 'contribution';
-- the perfect Merkle nodes, keyed by their in-order position (merkle.position)
CREATE TABLE IF NOT EXISTS merkle_nodes(position INTEGER PRIMARY KEY, hash BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS revisions(
    sequence INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    root TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    authored_at TEXT NOT NULL,
    title TEXT NOT NULL,
    record_length INTEGER NOT NULL,
    authority_seq INTEGER NOT NULL
);
-- an object's first revision is found by its root (objects.created_sequence); only the later
-- ones are indexed by root, so creating an object writes no page of this index
DROP INDEX IF EXISTS revisions_root;
CREATE INDEX IF NOT EXISTS revisions_later ON revisions(root, sequence) WHERE id != root;
""" + _OBJECTS.format(name="objects") + _OBJECT_INDEXES + """CREATE TABLE IF NOT EXISTS links(
    source_sequence INTEGER NOT NULL,
    position INTEGER NOT NULL,
    relation TEXT NOT NULL,
    target TEXT NOT NULL,
    target_root TEXT NOT NULL,
    PRIMARY KEY(source_sequence, position)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS links_target ON links(target, relation);
CREATE INDEX IF NOT EXISTS links_target_root ON links(target_root, relation);
-- object views (objects.py): incoming links in admission order, without tree links and votes
CREATE INDEX IF NOT EXISTS links_related ON links(target_root, source_sequence) WHERE relation
    NOT IN ('contained_in', 'replies_to', 'answers', 'branches_from', 'about', 'evidence_for',
            'assesses', 'proposes_for', 'votes_on');
CREATE INDEX IF NOT EXISTS links_incoming ON links(target, source_sequence)
    WHERE relation != 'votes_on';
CREATE INDEX IF NOT EXISTS links_relationships ON links(target_root, source_sequence)
    WHERE relation IN ('relates_from', 'relates_to');
CREATE TABLE IF NOT EXISTS votes(
    author TEXT NOT NULL, target TEXT NOT NULL, vote_root TEXT NOT NULL,
    PRIMARY KEY(author, target)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS authorities(
    sequence INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    roles TEXT NOT NULL,
    document BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS authorities_key ON authorities(key);
CREATE TABLE IF NOT EXISTS revocations(
    sequence INTEGER PRIMARY KEY, key TEXT NOT NULL, issuer TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS revocations_key ON revocations(key);
-- one row per revision and ancestor of its object (the object's own revisions are found
-- through objects and revisions_later: no page keyed by a fresh root is written twice)
CREATE TABLE IF NOT EXISTS feed(
    root TEXT NOT NULL, sequence INTEGER NOT NULL, PRIMARY KEY(root, sequence)
) WITHOUT ROWID;
"""


def _migrate_layout(conn: sqlite3.Connection) -> None:
    """Bring a database written by an earlier layout to this one, in one transaction: tree
    ancestors move from the ``closure`` table into ``objects.ancestors``; ``feed`` loses the
    rows of each object's own revisions (read through ``objects`` and ``revisions_later``);
    ``objects`` keyed by root becomes a table in creation order; Merkle nodes keyed by
    ``(level, idx)`` are keyed by their in-order position."""
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'merkle'"
    ).fetchone() is not None:
        conn.execute(
            "INSERT INTO merkle_nodes(position, hash)"
            " SELECT (idx << (level + 1)) | ((1 << level) - 1), hash FROM merkle"
        )
        conn.execute("DROP TABLE merkle")
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'closure'"
    ).fetchone() is not None:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(objects)")}
        if "ancestors" not in columns:
            conn.execute("ALTER TABLE objects ADD COLUMN ancestors TEXT NOT NULL DEFAULT ''")
        conn.execute(
            "UPDATE objects SET ancestors = coalesce((SELECT group_concat(ancestor, ' ')"
            " FROM closure WHERE member = objects.root), '')"
        )
        conn.execute(
            "DELETE FROM feed WHERE EXISTS (SELECT 1 FROM revisions r"
            " WHERE r.sequence = feed.sequence AND r.root = feed.root)"
        )
        conn.execute("DROP TABLE closure")
    keyed_by_root = conn.execute(
        "SELECT 1 FROM pragma_table_info('objects') WHERE name = 'root' AND pk = 1"
    ).fetchone()
    if keyed_by_root is not None:
        conn.execute(_OBJECTS.format(name="objects_by_creation"))
        columns_text = (
            "created_sequence, root, kind, author, head, head_sequence, revisions, depth,"
            " parent, vote_target, feed_links, ancestors"
        )
        conn.execute(
            f"INSERT INTO objects_by_creation({columns_text}) SELECT {columns_text} FROM objects"
        )
        conn.execute("DROP TABLE objects")  # and its indexes
        conn.execute("ALTER TABLE objects_by_creation RENAME TO objects")
        for statement in _OBJECT_INDEXES.split(";"):
            if statement.strip():
                conn.execute(statement)


class _StateView:
    """``rules.view.StateView`` over the writer's connection, inside its transaction."""

    def __init__(self, conn: sqlite3.Connection, authority_cache: dict[int, AuthorityCertificate],
                 genesis: Genesis, memory: WriterMemory) -> None:
        self.conn = conn
        self.cache = authority_cache
        self.genesis = genesis
        self.memory = memory

    def admitted(self, rev: str) -> int | None:
        row = self.conn.execute("SELECT sequence FROM revisions WHERE id = ?", (rev,)).fetchone()
        return None if row is None else int(row[0])

    def document_admitted(self, leaf: bytes) -> int | None:
        row = self.conn.execute(
            "SELECT sequence FROM log WHERE type != 'contribution' AND leaf_hash = ?",
            (merkle.leaf_hash(leaf),),
        ).fetchone()
        return None if row is None else int(row[0])

    def revision(self, rev: str) -> RevisionFacts | None:
        found: RevisionFacts | None = self.memory.cached(
            self.memory.revisions, rev, lambda: self._revision(rev)
        )
        return found

    def _revision(self, rev: str) -> RevisionFacts | None:
        row = self.conn.execute(
            "SELECT sequence, root, kind, author, authored_at, record_length FROM revisions"
            " WHERE id = ?",
            (rev,),
        ).fetchone()
        if row is None:
            return None
        sequence, length = row[0], row[5]
        ms = parse_ms(row[4])
        assert ms is not None

        def record() -> dict[str, Any]:
            leaf = self.conn.execute(
                "SELECT substr(leaf, 11, ?) FROM log WHERE sequence = ?", (length, sequence)
            ).fetchone()[0]
            value: dict[str, Any] = orjson.loads(leaf)
            return value

        return RevisionFacts(rev, row[1], row[2], row[3], ms, record)

    def object(self, root: str) -> ObjectFacts | None:
        found: ObjectFacts | None = self.memory.cached(
            self.memory.objects, root, lambda: self._object(root)
        )
        return found

    def _object(self, root: str) -> ObjectFacts | None:
        row = self.conn.execute(
            "SELECT root, kind, author, head, depth, feed_links FROM objects WHERE root = ?",
            (root,),
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
    """``checks_first``: ``fn`` raises its refusals (typed errors other than ServiceError)
    before it writes anything, so it needs no savepoint; any other failure of such a job aborts
    the whole batch (nothing in it was acknowledged, so nothing is lost)."""

    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    checks_first: bool = False


class _BatchAborted(Exception):
    pass


BUSY_TIMEOUT_S = 30.0
WRITER_CACHE_KIB = 65_536  # the writer's page cache: the hot B-tree pages of every index


class SqliteStorage(Storage):
    def __init__(self, path: str | Path, genesis: Genesis) -> None:
        self.path = str(path)
        self.genesis = genesis
        self._writer_db: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._writing: asyncio.Task[None] | None = None
        self._authority_cache: dict[int, AuthorityCertificate] = {}
        self._authority_bytes: dict[int, bytes] = {}
        self._memory = WriterMemory()
        self._checkpointer: WalCheckpointer | None = None
        self.clock: Callable[[], int] = now_ms

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        fresh = not Path(self.path).exists()
        db = await aiosqlite.connect(self.path, isolation_level=None)
        if fresh:
            # every admission dirties a leaf page in each index keyed by a hash (revision ids,
            # roots); the commit writes each whole page to the WAL, so smaller pages mean fewer
            # bytes written and checkpointed per admission (8 KiB pages cost ~30% more)
            await db.execute("PRAGMA page_size = 4096")
        await db.execute("PRAGMA journal_mode = WAL")
        await db.execute("PRAGMA synchronous = FULL")
        await db.execute("PRAGMA busy_timeout = 30000")  # opening; _begin waits for writes
        await db.executescript(SCHEMA)
        await db.executescript(PERSONAL_SCHEMA)
        await db.executescript(LOG_SCHEMA)
        await db.execute("PRAGMA busy_timeout = 0")  # from now on _begin does the waiting
        await db.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        await db.execute("PRAGMA wal_autocheckpoint = 0")  # see wal_checkpointer
        await db.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        self._checkpointer = WalCheckpointer(self.path)
        self._writer_db = db
        await self.write(_migrate_layout)
        await self.write(self._init_meta)
        await self.write(search_index.ensure)
        self._reader = await aiosqlite.connect(self.path, isolation_level=None)
        await self._reader.execute("PRAGMA busy_timeout = 30000")
        await self._reader.execute("PRAGMA query_only = 1")

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
            raise ServiceError(
                f"{self.path} belongs to the library with genesis {row[0]}, not {self.genesis.pin}",
                "GENESIS_MISMATCH",
            )

    async def close(self) -> None:
        if self._writing is not None:
            self._jobs.put(None)  # after the jobs already queued
            with contextlib.suppress(Exception):
                await self._writing
            self._writing = None
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        for db in (self._writer_db, self._reader):
            if db is not None:
                await db.close()
        self._writer_db = self._reader = None

    @property
    def reader(self) -> aiosqlite.Connection:
        assert self._reader is not None, "storage is not open"
        return self._reader

    async def meta(self, key: str) -> str | None:
        async with self.reader.execute("SELECT value FROM meta WHERE key = ?", (key,)) as cur:
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    # --- the writer --------------------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T], checks_first: bool = False) -> T:
        """Run ``fn`` inside the next group-commit write transaction (its own savepoint) and
        return its result once the transaction is durable.  An exception rolls back ``fn``'s
        writes only and is raised here."""
        return await self._enqueue(fn, checks_first)

    def _enqueue(
        self, fn: Callable[[sqlite3.Connection], T], checks_first: bool
    ) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        if self._writing is None:
            db = self._writer_db
            assert db is not None, "storage is not open"
            # the writer loop occupies the writer connection's own thread until close()
            self._writing = loop.create_task(db._execute(self._write_forever, db._conn, loop))  # type: ignore[no-untyped-call]
        fut: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(fn, fut, checks_first))
        return fut

    def _write_forever(self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop) -> None:
        """The writer thread: take everything queued, run it as one batch, hand the results to
        the event loop, and go straight on with whatever queued meanwhile (no round trip
        through the event loop between two batches)."""
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
                results = [ServiceError(f"storage failed: {exc}")] * len(batch)
            loop.call_soon_threadsafe(self._resolve, batch, results)
            if self._checkpointer is not None and self._checkpointer.catch_up:
                self._checkpointer.catch_up_on(conn)  # after the answers: see wal_checkpointer
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

    @staticmethod
    def _begin(conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, waiting for another process's write transaction with short
        sleeps: SQLite's own busy handler backs off to 100 ms sleeps, which starves a
        multi-process server of throughput."""
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

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> list[Any]:
        results: list[Any] = []
        try:
            SqliteStorage._begin(conn)
        except sqlite3.Error as exc:
            return [ServiceError(f"database is busy: {exc}", "STORAGE_BUSY")] * len(batch)
        try:
            self._memory.begin(conn)
            for job in batch:
                if job.checks_first:
                    try:
                        results.append(job.fn(conn))
                    except AlexandriaError as exc:
                        if isinstance(exc, ServiceError):
                            raise _BatchAborted(exc) from exc
                        results.append(exc)
                    except Exception as exc:
                        raise _BatchAborted(exc) from exc
                    continue
                conn.execute("SAVEPOINT job")
                try:
                    results.append(job.fn(conn))
                    conn.execute("RELEASE job")
                except Exception as exc:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    results.append(exc)
                # any other write (authority documents, personal lists, checkpoints, an index
                # rebuild) may have changed what the memory holds, or been rolled back
                self._memory.forget()
            conn.execute("COMMIT")
        except (sqlite3.Error, _BatchAborted) as exc:
            self._memory.forget()
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            return [ServiceError(f"storage failed: {exc}", "STORAGE_FAILED")] * len(batch)
        if self._checkpointer is not None:
            self._checkpointer.kick()
        return results

    # --- admission ---------------------------------------------------------------------------

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        return await self.submit(cand, dry_run)

    def submit(self, cand: Candidate, dry_run: bool = False) -> asyncio.Future[Admitted | DryRun]:
        """``admit`` without a coroutine: the future resolves once the admission is durable
        (used by ``writer_service``, which answers many requests per connection)."""
        return self._enqueue(lambda conn: self._admit(conn, cand, dry_run), checks_first=True)

    async def admit_many(self, cands: Sequence[Candidate]) -> list[Admitted | DryRun | Exception]:
        """The bulk path (loaders): each candidate exactly as ``admit`` would, in order, all in
        one write transaction, each in its own savepoint so that a refusal undoes only itself."""

        def run(conn: sqlite3.Connection) -> list[Admitted | DryRun | Exception]:
            out: list[Admitted | DryRun | Exception] = []
            for cand in cands:
                conn.execute("SAVEPOINT bulk")
                try:
                    out.append(self._admit(conn, cand, False))
                except Exception as exc:
                    conn.execute("ROLLBACK TO bulk")
                    self._memory.forget()
                    out.append(exc)
                conn.execute("RELEASE bulk")
            return out

        return await self.write(run)

    def _view(self, conn: sqlite3.Connection) -> _StateView:
        return _StateView(conn, self._authority_cache, self.genesis, self._memory)

    def _admit(self, conn: sqlite3.Connection, cand: Candidate, dry_run: bool) -> Admitted | DryRun:
        view = self._view(conn)
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
        sequence, admitted_at = self._append_leaf(conn, "contribution", cand.leaf, now)
        self._store_contribution(conn, cand, verdict, sequence)
        authority = self._authority_document_bytes(conn, verdict.authority_sequence)
        admission = admission_bytes(sequence, admitted_at, authority)
        signed = signed_record_bytes(
            cand.leaf, cand.record_length, verdict.id, verdict.root, admission
        )
        return Admitted(True, verdict.id, verdict.root, sequence, signed, admission)

    def _admission_clock(self, conn: sqlite3.Connection) -> int:
        """The admission time: the server clock, but never before the last admission, so that
        ``admitted_at`` never decreases along the log.  The rules are checked at exactly the
        time that is recorded, so an offline replay at the recorded times reaches the same
        verdicts."""
        return max(self.clock(), self._memory.tail(conn)[1])

    def _append_leaf(
        self, conn: sqlite3.Connection, kind: str, leaf: bytes, now: int
    ) -> tuple[int, str]:
        """Append ``leaf`` at admission time ``now`` (from ``_admission_clock``)."""
        memory = self._memory
        sequence = memory.tail(conn)[0] + 1
        admitted_at = format_ms(now)
        leaf_hash = merkle.leaf_hash(leaf)
        conn.execute(
            "INSERT INTO log(sequence, type, leaf, leaf_hash, admitted_at) VALUES (?, ?, ?, ?, ?)",
            (sequence, kind, leaf, leaf_hash, admitted_at),
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
        conn.execute(
            "INSERT INTO revisions(sequence, id, root, kind, author, authored_at, title,"
            " record_length, authority_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sequence, v.id, v.root, v.kind, v.author, rec.authored_at, rec.title,
             cand.record_length, v.authority_sequence),
        )
        if v.previous:
            conn.execute(
                "UPDATE objects SET head = ?, head_sequence = ?, revisions = revisions + 1"
                " WHERE root = ?",
                (v.id, sequence, v.root),
            )
            cached = memory.objects.get(v.root)
            if cached is not None:
                memory.objects[v.root] = object_after(v, cached)
            ancestors = memory.ancestors_of(conn, v.root)
        else:
            parent = next((t for r, t in v.feed_links if r == "contained_in"), "")
            # ancestors of a new object: its feed parents and their ancestors
            ancestors = tuple(dict.fromkeys(
                a for p in v.parent_roots for a in (p, *memory.ancestors_of(conn, p))
            ))
            conn.execute(
                "INSERT INTO objects(root, kind, author, head, head_sequence, revisions, depth,"
                " parent, vote_target, feed_links, created_sequence, ancestors)"
                " VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)",
                (v.root, v.kind, v.author, v.id, sequence, v.depth, parent, v.vote_target,
                 orjson.dumps(v.feed_links).decode(), sequence, " ".join(ancestors)),
            )
            if v.vote_target:
                conn.execute(
                    "INSERT INTO votes(author, target, vote_root) VALUES (?, ?, ?)",
                    (v.author, v.vote_target, v.root),
                )
            memory.ancestors[v.root] = ancestors
        conn.executemany(
            "INSERT INTO feed(root, sequence) VALUES (?, ?)", [(r, sequence) for r in ancestors]
        )
        conn.executemany(
            "INSERT INTO links(source_sequence, position, relation, target, target_root)"
            " VALUES (?, ?, ?, ?, ?)",
            [
                (sequence, i, lk.relation, lk.target, target_root)
                for i, (lk, target_root) in enumerate(zip(rec.links, v.link_roots, strict=True))
            ],
        )
        search_index.on_admitted(conn, rec, v, sequence, memory.actors, cand.index_text)

    # --- authority documents -----------------------------------------------------------------

    async def admit_authority(self, document: Any) -> AuthorityAdmitted:
        return await self.write(lambda conn: self._admit_authority(conn, document))

    def _admit_authority(self, conn: sqlite3.Connection, document: Any) -> AuthorityAdmitted:
        """The rules' verdict (``authority.check_authority_document``), then the leaf and the
        row the rules will ask about later."""
        now = self._admission_clock(conn)
        v = check_authority_document(self._view(conn), document, self.genesis, now)
        if v.retry_of is not None:
            row = conn.execute(
                "SELECT admitted_at FROM log WHERE sequence = ?", (v.retry_of,)
            ).fetchone()
            return AuthorityAdmitted(False, v.retry_of, row[0], orjson.loads(v.leaf))
        sequence, admitted_at = self._append_leaf(conn, v.type, v.leaf, now)
        if v.certificate is not None:
            cert = v.certificate
            conn.execute(
                "INSERT INTO authorities(sequence, key, roles, document) VALUES (?, ?, ?, ?)",
                (sequence, cert.key, json.dumps(list(cert.roles)), v.leaf),
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
        async with self.reader.execute(
            "SELECT sequence, type, admitted_at, leaf FROM log"
            " WHERE type != 'contribution' ORDER BY sequence"
        ) as cur:
            rows = await cur.fetchall()
        return [
            {"sequence": s, "type": t, "admitted_at": a, "document": orjson.loads(leaf)}
            for s, t, a, leaf in rows
        ]

    # --- reads -------------------------------------------------------------------------------

    def _authority_document_bytes(self, conn: sqlite3.Connection, seq: int) -> bytes:
        data = self._authority_bytes.get(seq)
        if data is None:
            row = conn.execute(
                "SELECT document FROM authorities WHERE sequence = ?", (seq,)
            ).fetchone()
            if row is None:
                raise ServiceError(f"authority certificate {seq} is missing", "LOG_CORRUPT")
            data = self._authority_bytes[seq] = bytes(row[0])
        return data

    _SIGNED_SQL = (
        "SELECT r.id, r.root, r.sequence, r.record_length, r.authority_seq, l.leaf, l.admitted_at"
        " FROM revisions r JOIN log l ON l.sequence = r.sequence"
    )

    def _assemble(self, conn: sqlite3.Connection, row: Sequence[Any]) -> bytes:
        rev_id, root, seq, rlen, aseq, leaf, admitted_at = row
        adm = admission_bytes(seq, admitted_at, self._authority_document_bytes(conn, aseq))
        return signed_record_bytes(bytes(leaf), rlen, rev_id, root, adm)

    def _signed_sync(self, conn: sqlite3.Connection, sequence: int) -> bytes | None:
        row = conn.execute(self._SIGNED_SQL + " WHERE r.sequence = ?", (sequence,)).fetchone()
        return None if row is None else self._assemble(conn, row)

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a synchronous read function on the reader connection's thread."""
        result: T = await self.reader._execute(fn, self.reader._conn)  # type: ignore[no-untyped-call]
        return result

    def signed_many(self, conn: sqlite3.Connection, sequences: Sequence[int]) -> list[bytes]:
        """Signed records for the given revision sequences, in the given order."""
        out = []
        for seq in sequences:
            data = self._signed_sync(conn, seq)
            if data is not None:
                out.append(data)
        return out

    async def entry(self, rev: str) -> bytes | None:
        def fn(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(self._SIGNED_SQL + " WHERE r.id = ?", (rev,)).fetchone()
            return None if row is None else self._assemble(conn, row)

        return await self.read(fn)

    async def head_entry(self, rev: str) -> bytes | None:
        def fn(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT o.head_sequence FROM revisions r JOIN objects o ON o.root = r.root"
                " WHERE r.id = ?", (rev,),
            ).fetchone()
            return None if row is None else self._signed_sync(conn, row[0])

        return await self.read(fn)

    async def log_size(self) -> int:
        async with self.reader.execute("SELECT max(sequence) FROM log") as cur:
            row = await cur.fetchone()
        return int(row[0] or 0) if row else 0

