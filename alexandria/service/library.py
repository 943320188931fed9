"""A running library: its pinned genesis, its storage and its log key.  The HTTP app and the
operator commands share this object; nothing else holds global state."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from alexandria.core.canonical import parse_json
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.core.keys import SigningKey
from alexandria.core.timestamps import parse_ms
from alexandria.core.trust import Genesis
from alexandria.errors import Forbidden, ServiceError
from alexandria.reads.changes import DEFAULT_LIMITS, Limits
from alexandria.reads.log import latest_checkpoint
from alexandria.rules.admission import Candidate
from alexandria.service.checkpoint_signer import CheckpointSigner
from alexandria.service.cosigning import Cosigning
from alexandria.service.published import PublishedCheckpoint, path_for
from alexandria.service.writer_service import WriterClient
from alexandria.store import log_floor
from alexandria.store.backends import storage_for
from alexandria.store.interface import Admitted, AuthorityAdmitted, DryRun
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.merkle_nodes import tree_size


class ReadOnlyMirror(Forbidden):
    """A write sent to a mirror: it takes none; ``details.origin`` is where to send it."""

    default_code = "READ_ONLY_MIRROR"


#: a mirror whose origin has not answered for this many seconds is not ready (``--stale-after``)
ORIGIN_STALE_AFTER_S = 30.0


@dataclass
class MirrorState:
    """What a mirror's follower last saw (``api/mirror.py`` keeps it up to date)."""

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
    storage: LedgerStorage
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
    _problem: ServiceError | None = field(default=None, init=False, repr=False)
    _checked_at: float = field(default=float("-inf"), init=False, repr=False)

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
                    raise ServiceError(
                        f"{self.published.path} holds a checkpoint of the log {origin!r}, not"
                        f" of this library's {self.genesis.origin!r}: --log-key names another"
                        " library's key", "PUBLISHED_CHECKPOINT_MISMATCH",
                        path=str(self.published.path))
                await self.storage.write(lambda conn: log_floor.raise_floor(conn, note))
        await self.log_problem(fresh=True)

    async def log_problem(self, fresh: bool = False) -> ServiceError | None:
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

            def check(conn: Any) -> ServiceError | None:
                floors = log_floor.read_floor(conn)
                if kept is not None:
                    floors.append(kept)
                size = tree_size(conn)
                return log_floor.log_problem(conn, floors, size) or self._witnessed(size)

            problem = await self.storage.read(check)
        self._problem, self._checked_at = problem, now
        return problem

    def _witnessed(self, size: int) -> ServiceError | None:
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

    def _refused(self, exc: ServiceError) -> None:
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
            return await self.storage.admit_authority(document)
        except ServiceError as exc:
            self._refused(exc)
            raise

    async def status(self) -> Status:
        def read(conn: Any) -> tuple[int, int, str]:
            latest = latest_checkpoint(conn)
            return (tree_size(conn), latest.size if latest else 0,
                    latest.signed_at if latest else "")

        size, cp_size, signed_at = await self.storage.read(read)
        signed_ms = parse_ms(signed_at) if signed_at else None
        age = -1.0 if signed_ms is None else max(0.0, (self.storage.clock() - signed_ms) / 1000)
        reasons: list[str] = []
        if not self.storage.writing:
            reasons.append("the storage's writer thread has stopped")
        if self.writer is not None and self.writer.lost is not None:
            reasons.append(f"the admission writer process is gone ({self.writer.lost})")
        problem = await self.log_problem()
        if problem is not None:
            reasons.append(log_reason(problem))
        mirror = self.mirror
        if mirror is not None:
            reasons.extend(mirror.reasons(size))
        return Status(not reasons, tuple(reasons), size, cp_size, age,
                      mirror.origin if mirror else None, mirror.origin_size if mirror else None,
                      mirror.silent_for() if mirror else None)

    async def close(self) -> None:
        if self.writer is not None:
            await self.writer.close()
        await self.storage.close()

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        """Admit (or dry-run) a prepared envelope: here, or in the writer process."""
        await self.check_writable()
        try:
            if self.writer is not None:
                return await self.writer.admit(cand, dry_run)
            return await self.storage.admit(cand, dry_run)
        except ServiceError as exc:
            self._refused(exc)
            raise


#: seconds a node trusts its last look at the log's state while all was well (the writer
#: checks inside every write transaction regardless)
LOG_RECHECK_S = 1.0
#: and while it may not extend the log (each refused request would look otherwise)
LOG_TROUBLE_RECHECK_S = 0.2
LOG_PROBLEMS = frozenset({"CATCH_UP_REQUIRED", "LOG_FORKED", "DATABASE_REPLACED"})


def log_reason(problem: ServiceError) -> str:
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


def load_genesis(path: str | Path) -> Genesis:
    return Genesis.from_document(orjson.loads(Path(path).read_bytes()))
