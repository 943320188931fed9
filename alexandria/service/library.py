"""A running library: its pinned genesis, its storage and its log key.  The HTTP app and the
operator commands share this object; nothing else holds global state."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson

from alexandria.core.canonical import parse_json
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.core.keys import SigningKey
from alexandria.core.timestamps import parse_ms
from alexandria.core.trust import Genesis
from alexandria.errors import (
    AdmissionTimeout,
    AlexandriaError,
    Failed,
    NotPermitted,
    StorageUnavailable,
)
from alexandria.reads.changes import DEFAULT_LIMITS, Limits
from alexandria.reads.log import latest_checkpoint
from alexandria.rules.admission import Candidate
from alexandria.service.checkpoint_signer import CheckpointSigner
from alexandria.service.cosigning import Cosigning
from alexandria.service.published import PublishedCheckpoint, path_for
from alexandria.service.writer_service import WriterClient
from alexandria.store import log_floor
from alexandria.store.backends import storage_for
from alexandria.store.interface import Admitted, AuthorityAdmitted, DryRun, Storage
from alexandria.store.merkle_nodes import tree_size
from alexandria.store.outage import describe, outage_of

T = TypeVar("T")
log = logging.getLogger("alexandria.storage")
#: how long a process that cannot open its library waits before it tries again: first, at most
OPEN_RETRY_FIRST_S = 0.25
OPEN_RETRY_MAX_S = 2.0

#: how long an admission (or an authority document) may wait for the writer before it is
#: answered 503 ``ADMISSION_TIMEOUT`` (``serve --admission-deadline``)
DEFAULT_ADMISSION_DEADLINE_S = 10.0
#: ``/healthz`` and ``/metrics`` wait at most this long for a fresh reading of the database,
#: and otherwise answer from the last one: they never block on the database
FRESH_WAIT_S = 0.05
#: the background probe's period (``Library.monitoring``); a reading of the database not
#: answered within ``PROBE_TIMEOUT_S`` makes the library not ready
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 3.0
#: not ready below this much free space on the database's file system: every worker sees a
#: disk about to fill, before its own writes fail
LOW_SPACE_BYTES = 1 << 20


@dataclass(frozen=True)
class _Reading:
    """What the last reading of the database found (``Library._read_state``)."""

    log_size: int = 0
    checkpoint_size: int = 0
    signed_at: str = ""
    free_bytes: int | None = None  # on the database's file system, where the storage knows


class ReadOnlyMirror(NotPermitted):
    """A write sent to a mirror: it takes none; ``details.origin`` is where to send it."""

    default_code = "READ_ONLY_MIRROR"


#: a mirror whose origin has not answered for this many seconds is not ready (``--stale-after``)
ORIGIN_STALE_AFTER_S = 30.0


@dataclass
class MirrorState:
    """What a mirror's follower last saw (``service/mirror.py`` keeps it up to date)."""

    origin: str
    origin_size: int = 0  # the largest size the origin signed, as last seen
    synced: bool = False  # caught up with the origin's checkpoint at least once
    error: str | None = None  # why the follower stopped
    failure: Exception | None = None  # the typed error it stopped with
    #: not ready once the origin has not answered for this many seconds
    stale_after: float = ORIGIN_STALE_AFTER_S
    #: ``time.monotonic()`` of the origin's last answer read whole (of the start, before one)
    answered: float = field(default_factory=time.monotonic)
    #: why the follower could not follow the origin the last time it tried (None: it could)
    trouble: str | None = None
    #: stops the server once the follower has stopped (set by whoever runs it)
    stop: Callable[[], None] | None = field(default=None, repr=False)

    def silent_for(self) -> float:
        """Seconds since the origin last answered."""
        return max(0.0, time.monotonic() - self.answered)

    def reasons(self, size: int) -> list[str]:
        """Why this mirror is not ready, given the size of its own log."""
        if self.error is not None:
            return [f"the mirror stopped following {self.origin}: {self.error}"]
        out = []
        silent = self.silent_for()
        if silent > self.stale_after:
            why = f": {self.trouble}" if self.trouble else ""
            out.append(f"{self.origin} has not answered for {silent:.0f} s{why}; this mirror"
                       f" holds {size} of the {self.origin_size} leaves it last saw there")
        if not self.synced:
            out.append(f"catching up with {self.origin}: {size} of {self.origin_size} leaves")
        return out


@dataclass(frozen=True)
class Status:
    """``/healthz`` and the library-wide gauges of ``/metrics``."""

    ready: bool
    reasons: tuple[str, ...]
    log_size: int
    checkpoint_size: int
    checkpoint_age_s: float
    origin: str | None = None
    origin_size: int | None = None
    #: a mirror's: seconds since its origin last answered
    origin_silent_s: float | None = None

    @property
    def lag(self) -> int | None:
        """A mirror's: the origin's leaves (as last seen) it does not hold."""
        return None if self.origin_size is None else max(0, self.origin_size - self.log_size)


@dataclass
class Library:
    genesis: Genesis
    storage: Storage
    log_key: SigningKey | None = None
    writer: WriterClient | None = None  # the writer process of a multi-process server
    #: ``/api/changes`` page bounds (PROTOCOL §5); tests set smaller ones
    limits: Limits = DEFAULT_LIMITS
    #: the witnesses asked to cosign each new checkpoint (``--witness``), and the quorum
    #: ``GET /api/log/checkpoint`` waits for before serving a checkpoint
    cosigning: Cosigning = field(default_factory=Cosigning)
    #: the largest checkpoint this library served, kept beside its log key (never in the db)
    published: PublishedCheckpoint | None = None
    #: a mirror's state: it follows this origin, takes no writes and signs nothing
    mirror: MirrorState | None = None
    #: signs this library's checkpoints; concurrent requests share one signing
    checkpoints: CheckpointSigner = field(init=False, repr=False)
    _problem: Failed | None = field(default=None, init=False, repr=False)
    _checked_at: float = field(default=float("-inf"), init=False, repr=False)
    #: seconds an admission may wait for the writer (``AdmissionTimeout`` after)
    admission_deadline_s: float = DEFAULT_ADMISSION_DEADLINE_S
    _reading: _Reading = field(default_factory=_Reading, init=False, repr=False)
    _read_error: str | None = field(default=None, init=False, repr=False)
    _refreshing: asyncio.Future[None] | None = field(default=None, init=False, repr=False)
    _refresh_started: float = field(default=0.0, init=False, repr=False)
    _probing: asyncio.Future[None] | None = field(default=None, init=False, repr=False)
    #: admissions past their deadline that the writer has not answered yet: when sent
    _stalled: dict[asyncio.Future[Any], float] = field(default_factory=dict, init=False,
                                                       repr=False)

    def __post_init__(self) -> None:
        self.checkpoints = CheckpointSigner(self)
        self.checkpoints.listeners.append(self.cosigning.signed)

    @property
    def origin_url(self) -> str | None:
        return None if self.mirror is None else self.mirror.origin

    @classmethod
    def from_files(
        cls, genesis_path: str | Path, db_path: str | Path, log_key_path: str | Path | None = None,
        read_db: str | None = None,
    ) -> Library:
        """``read_db``: a streaming replica of the PostgreSQL ``db_path`` for reads."""
        genesis = load_genesis(genesis_path)
        log_key = SigningKey.load(log_key_path) if log_key_path else None
        published = PublishedCheckpoint(path_for(log_key_path)) if log_key_path else None
        return cls(genesis, storage_for(db_path, genesis, read_db), log_key,
                   published=published)

    async def open_when_reachable(self) -> None:
        """``open``, waiting while the database cannot be reached: an HTTP worker restarted
        during a database outage waits for it (one log line when it starts waiting, one when
        it opens) instead of failing its start, which would stop the whole server as a crash
        loop.  The server's other processes answer meanwhile; every other failure to open is
        raised at once."""
        pause = OPEN_RETRY_FIRST_S
        began: float | None = None
        while True:
            try:
                await self.open()
            except Exception as exc:
                if not isinstance(outage_of(exc), StorageUnavailable):
                    raise
                with contextlib.suppress(Exception):
                    await self.close()
                if began is None:
                    began = time.monotonic()
                    log.warning("%s: process %d cannot open the library (%s); retrying until"
                                " the database can be reached", self.storage.path, os.getpid(),
                                describe(exc))
                await asyncio.sleep(pause)
                pause = min(pause * 2, OPEN_RETRY_MAX_S)
                continue
            if began is not None:
                log.warning("%s: process %d opened the library after %.1f s of waiting for the"
                            " database", self.storage.path, os.getpid(), time.monotonic() - began)
            return

    async def open(self) -> None:
        await self.storage.open()
        if self.writer is not None:
            await self.writer.connect()
        if self.published is not None and self.mirror is None:
            # the database learns what this node's log key published: every process of the
            # server, and on PostgreSQL every node, then refuses to extend another history
            published = await asyncio.to_thread(self.published.load)
            if published is not None:
                note = published.note
                origin = parse_checkpoint(note)[0].origin
                if origin != self.genesis.origin:
                    raise Failed(
                        f"{self.published.path} holds a checkpoint of the log {origin!r}, not"
                        f" of this library's {self.genesis.origin!r}: --log-key names another"
                        " library's key", "PUBLISHED_CHECKPOINT_MISMATCH",
                        path=str(self.published.path))
                await self.storage.write(lambda conn: log_floor.raise_floor(conn, note))
        await self.log_problem(fresh=True)
        await self._read_state()  # what /healthz answers from until the probe reads again

    async def log_problem(self, fresh: bool = False) -> Failed | None:
        """Why this node may not extend its log (``store/log_floor.py``): the database is
        behind the largest checkpoint published (``CATCH_UP_REQUIRED``), or another history
        (``LOG_FORKED``), or not the file it opened.  Looked up again at most every
        ``LOG_RECHECK_S`` while all is well, every ``LOG_TROUBLE_RECHECK_S`` while not (a
        catch-up from another process ends it); the writer checks it again inside each write
        transaction, so this is the answer for readiness and the early refusal."""
        if self.mirror is not None:
            return None
        now = time.monotonic()
        if not fresh and now - self._checked_at < (
                LOG_RECHECK_S if self._problem is None else LOG_TROUBLE_RECHECK_S):
            return self._problem
        problem = self.storage.replaced()
        if problem is None:
            keeper = self.published
            kept = await asyncio.to_thread(keeper.load) if keeper is not None else None

            def check(conn: Any) -> Failed | None:
                floors = log_floor.read_floor(conn)
                if kept is not None:
                    floors.append(kept)
                size = tree_size(conn)
                return log_floor.log_problem(conn, floors, size) or self._witnessed(size)

            problem = await self.storage.read(check)
        self._problem, self._checked_at = problem, now
        return problem

    def _witnessed(self, size: int) -> Failed | None:
        """What the witnesses said of this log (``Cosigning.seen``): one cosigned a checkpoint
        this tree lacks leaves of, or holds another root at a size it holds."""
        for name, saw in sorted(self.cosigning.seen.items()):
            if saw.forked:
                return log_floor.LogForked(
                    f"the witness {name} cosigned another checkpoint of size {saw.size} of this"
                    " log: the database is not the history it witnessed. "
                    + log_floor.FORKED_ADVICE, witness=name, published_size=saw.size,
                    tree_size=size)
            if size < saw.size:
                return log_floor.CatchUpRequired(
                    f"the witness {name} cosigned a checkpoint of size {saw.size} of this log"
                    f" but the database holds {size} leaves (restored from an older backup?):"
                    " it serves reads but takes no writes until the missing entries are"
                    " replayed: run `alexandria restore --db DB --catch-up URL` with the URL of"
                    " a mirror (or of an export file: --catch-up FILE)", witness=name,
                    published_size=saw.size, tree_size=size)
        return None

    def _refused(self, exc: Failed) -> None:
        """The writer refused an admission for the log's state: remember it at once."""
        if exc.code in LOG_PROBLEMS:
            self._problem, self._checked_at = exc, time.monotonic()

    async def check_writable(self) -> None:
        """Refuse a write on a mirror (403, naming the origin), or while the database is
        behind or a fork of the checkpoint this library published (503, saying how to
        recover)."""
        if self.mirror is not None:
            raise ReadOnlyMirror(
                f"this is a read-only mirror of {self.mirror.origin}: send writes there",
                origin=self.mirror.origin,
            )
        problem = await self.log_problem()
        if problem is not None:
            raise problem

    async def admit_authority(self, body: bytes) -> AuthorityAdmitted:
        """Admit the authority document ``body`` (at most 64 KiB, ``api.http.read_body``):
        parsed off the event loop (strict JSON of a hostile body costs milliseconds), its
        signatures verified before the writer (``LedgerStorage.admit_authority``)."""
        await self.check_writable()
        document = await asyncio.to_thread(parse_json, body)
        try:
            return await self._within_deadline(
                asyncio.ensure_future(self.storage.admit_authority(document)))
        except Failed as exc:
            self._refused(exc)
            raise

    async def status(self) -> Status:
        """``/healthz`` and the gauges of ``/metrics``, from the state this process holds:
        a fresh reading of the database if one arrives within ``FRESH_WAIT_S`` (and no outage
        is in progress), else the last one.  Never waits longer on the database."""
        fresh = self._refresh()
        if not fresh.done() and not self.storage.outages.current():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fresh), FRESH_WAIT_S)
        return self.held_status()

    def _refresh(self) -> asyncio.Future[None]:
        """The reading of the database in progress, or a new one: one at a time, so a
        database that does not answer holds one reader, not one per probe."""
        fut = self._refreshing
        if fut is None or fut.done():
            self._refresh_started = time.monotonic()
            fut = self._refreshing = asyncio.ensure_future(self._read_state())
        return fut

    async def _read_state(self) -> None:
        def read(conn: Any) -> _Reading:
            latest = latest_checkpoint(conn)
            return _Reading(tree_size(conn), latest.size if latest else 0,
                            latest.signed_at if latest else "", self.storage.free_bytes())

        try:
            reading = await self.storage.read(read)
        except Exception as exc:  # the reason /healthz gives; the storage logged the episode
            self._read_error = (f"{exc.code}: {exc.message}" if isinstance(exc, Failed)
                                else describe(exc))
            return
        self._reading, self._read_error = reading, None
        with contextlib.suppress(Exception):  # a failing read is the reason given above
            await self.log_problem()  # what held_status reports of the log's state

    def held_status(self) -> Status:
        """The status from what this process already holds (no IO)."""
        reading = self._reading
        size = reading.log_size
        signed_ms = parse_ms(reading.signed_at) if reading.signed_at else None
        age = -1.0 if signed_ms is None else max(0.0, (self.storage.clock() - signed_ms) / 1000)
        reasons: list[str] = []
        if not self.storage.writing:
            reasons.append("the storage's writer thread has stopped")
        if self.writer is not None and self.writer.lost is not None:
            reasons.append(f"the admission writer process is gone ({self.writer.lost})")
        now = time.monotonic()
        for path, episode in self.storage.outages.current().items():
            reasons.append(f"storage {path} failing for {now - episode.since:.0f} s"
                           f" ({episode.error.code}): {episode.error.message}")
        fut = self._refreshing
        if fut is not None and not fut.done() and now - self._refresh_started > PROBE_TIMEOUT_S:
            reasons.append("the database has not answered a reading for"
                           f" {now - self._refresh_started:.0f} s")
        elif self._read_error is not None:
            reasons.append(f"the database cannot be read: {self._read_error}")
        if reading.free_bytes is not None and reading.free_bytes < LOW_SPACE_BYTES:
            reasons.append(f"the file system holding the database has {reading.free_bytes}"
                           " bytes free: writes fail when it is full (DISK_FULL)")
        if self._stalled:
            waited = now - min(self._stalled.values())
            reasons.append(f"admissions stalled: the writer has not answered one for"
                           f" {waited:.0f} s (deadline {self.admission_deadline_s:g} s)")
        problem = self._problem if self.mirror is None else None
        if problem is not None:
            reasons.append(log_reason(problem))
        mirror = self.mirror
        if mirror is not None:
            reasons.extend(mirror.reasons(size))
        return Status(not reasons, tuple(reasons), size, reading.checkpoint_size, age,
                      mirror.origin if mirror else None, mirror.origin_size if mirror else None,
                      mirror.silent_for() if mirror else None)

    @contextlib.asynccontextmanager
    async def monitoring(self, interval: float = PROBE_INTERVAL_S) -> AsyncIterator[None]:
        """The background probe, for as long as the app runs: a reading of the database every
        ``interval`` (what ``/healthz`` answers from), and while writes are failing a probe
        write (``LedgerStorage.probe_write``), whose success ends the episode."""

        async def probe() -> None:
            while True:
                self._refresh()
                writes = self.storage.outages.failing("writes")
                if writes is not None and (self._probing is None or self._probing.done()):
                    self._probing = asyncio.ensure_future(self._probe_write())
                await asyncio.sleep(interval)

        task = asyncio.get_running_loop().create_task(probe())
        try:
            yield
        finally:
            task.cancel()
            for fut in (task, self._probing, self._refreshing):
                if fut is not None:
                    fut.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await fut

    async def _probe_write(self) -> None:
        with contextlib.suppress(Exception):  # the storage reports its own episodes
            await asyncio.wait_for(self.storage.probe_write(), PROBE_TIMEOUT_S * 10)

    async def _within_deadline(self, work: asyncio.Future[T]) -> T:
        """``work``'s result, or 503 ``ADMISSION_TIMEOUT`` once ``admission_deadline_s`` has
        passed.  The work goes on: the writer may still commit it, so the outcome is unknown
        to the client, who retries the same bytes; until the writer answers, the library is
        not ready (``held_status``).  A timer and a callback, not ``asyncio.wait_for`` and
        ``shield`` (which cost an admission tens of microseconds)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()

        def answered(done: asyncio.Future[T]) -> None:
            if answer.done():
                return
            if done.cancelled():
                answer.cancel()
            elif done.exception() is not None:
                answer.set_exception(cast(BaseException, done.exception()))
            else:
                answer.set_result(done.result())

        def expired() -> None:
            if answer.done():
                return
            self._stall(work)
            answer.set_exception(AdmissionTimeout(
                f"the writer did not answer within {self.admission_deadline_s:g} s: this"
                " admission may or may not have been stored. Retry the very same bytes later:"
                " an exact retry of a stored contribution is answered 200 with it, never"
                " stored twice", deadline_s=self.admission_deadline_s,
            ))

        work.add_done_callback(_retrieved)
        work.add_done_callback(answered)
        timer = loop.call_later(self.admission_deadline_s, expired)
        try:
            result = await answer
        except Failed as exc:
            if self.writer is not None and outage_of(exc) is not None:
                # the writer process logged it; this worker's probe sees when it ends
                self.storage.outages.failed("writes", exc, announce=False)
            raise
        finally:
            timer.cancel()
        self.storage.outages.ok("writes")
        return result

    def _stall(self, fut: asyncio.Future[Any]) -> None:
        if fut.done():
            return
        if not self._stalled:
            log.warning("admissions stalled: the writer has not answered within %g s",
                        self.admission_deadline_s)
        self._stalled[fut] = time.monotonic() - self.admission_deadline_s
        fut.add_done_callback(self._unstall)

    def _unstall(self, fut: asyncio.Future[Any]) -> None:
        since = self._stalled.pop(fut, None)
        if since is not None and not self._stalled:
            log.warning("admissions answered again after %.1f s", time.monotonic() - since)

    async def close(self) -> None:
        if self.writer is not None:
            await self.writer.close()
        await self.storage.close()

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        """Admit (or dry-run) a prepared envelope: here, or in the writer process."""
        await self.check_writable()
        try:
            if self.writer is not None:
                return await self._within_deadline(
                    asyncio.ensure_future(self.writer.admit(cand, dry_run)))
            return await self._within_deadline(self.storage.submit(cand, dry_run))
        except Failed as exc:
            self._refused(exc)
            raise

    async def admit_many(
        self, cands: Sequence[Candidate], dry_run: bool = False,
    ) -> list[Admitted | DryRun | Exception]:
        """Admit (or dry-run) prepared envelopes in order, each exactly as ``admit`` would, in
        one hand-off to the writer and one write transaction; one outcome per candidate (a
        refusal is that candidate's typed error).  The list is returned once every admission
        in it is durable."""
        if not cands:
            return []
        await self.check_writable()
        return await self._many(cands, dry_run)

    async def admit_chunks(
        self, chunks: AsyncIterator[Sequence[Candidate]], dry_run: bool = False,
    ) -> list[list[Admitted | DryRun | Exception] | AlexandriaError]:
        """``admit_many`` of each chunk as it arrives, without waiting for the chunks before it
        to be durable: every chunk is handed to the writer in arrival order (so admissions
        follow the chunks' order), each as one job, while the next is still being prepared.
        One outcome per chunk: its list, or the typed error that refused all of it.  Returned
        once every chunk's admissions are durable."""
        await self.check_writable()
        waiting: list[asyncio.Task[list[Admitted | DryRun | Exception]]] = []
        async for cands in chunks:
            # the task's first step hands the chunk over, before any later chunk's
            waiting.append(asyncio.ensure_future(self._many(cands, dry_run)))
        out: list[list[Admitted | DryRun | Exception] | AlexandriaError] = []
        for task in waiting:
            try:
                out.append(await task)
            except AlexandriaError as exc:
                out.append(exc)
        return out

    async def _many(
        self, cands: Sequence[Candidate], dry_run: bool,
    ) -> list[Admitted | DryRun | Exception]:
        if not cands:
            return []
        try:
            if self.writer is not None:
                return await self._within_deadline(
                    asyncio.ensure_future(self.writer.admit_many(cands, dry_run)))
            return await self._within_deadline(self.storage.submit_many(cands, dry_run))
        except Failed as exc:
            self._refused(exc)
            raise

#: seconds a node trusts its last look at the log's state while all was well (the writer
#: checks inside every write transaction regardless)
LOG_RECHECK_S = 1.0
#: and while it may not extend the log (each refused request would look otherwise)
LOG_TROUBLE_RECHECK_S = 0.2
LOG_PROBLEMS = frozenset({"CATCH_UP_REQUIRED", "LOG_FORKED", "DATABASE_REPLACED"})


def log_reason(problem: Failed) -> str:
    """``/healthz``'s reason for a log this node may not extend."""
    d = problem.details
    if problem.code == "CATCH_UP_REQUIRED":
        return (f"catching up: the database holds {d.get('tree_size')} of the"
                f" {d.get('published_size')} leaves this library published"
                " (CATCH_UP_REQUIRED: `alexandria restore --db DB --catch-up URL|EXPORT`)")
    if problem.code == "LOG_FORKED":
        return (f"the log is forked: its first {d.get('published_size')} leaves are not those"
                " of the checkpoint this library published (LOG_FORKED: restore a backup at"
                " least as new as that checkpoint; docs/operations.md)")
    return f"{problem.message} ({problem.code})"


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Take a finished admission's outcome, so one that nobody awaits any more (past its
    deadline, or its client gone) is not reported as never retrieved."""
    if not fut.cancelled():
        fut.exception()


def load_genesis(path: str | Path) -> Genesis:
    return Genesis.from_document(orjson.loads(Path(path).read_bytes()))
