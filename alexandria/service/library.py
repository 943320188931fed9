"""A running library: its pinned genesis, its storage and its log key.  The HTTP app and the
operator commands share this object; nothing else holds global state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from alexandria.core.canonical import parse_json
from alexandria.core.keys import SigningKey
from alexandria.core.timestamps import parse_ms
from alexandria.core.trust import Genesis
from alexandria.errors import Forbidden
from alexandria.reads.changes import DEFAULT_LIMITS, Limits
from alexandria.reads.log import latest_checkpoint
from alexandria.rules.admission import Candidate
from alexandria.service.checkpoint_signer import CheckpointSigner
from alexandria.service.cosigning import Cosigning
from alexandria.service.published import (
    CatchUpRequired,
    Published,
    PublishedCheckpoint,
    behind_message,
    path_for,
)
from alexandria.service.writer_service import WriterClient
from alexandria.store.backends import storage_for
from alexandria.store.interface import Admitted, AuthorityAdmitted, DryRun
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.merkle_nodes import tree_size


class ReadOnlyMirror(Forbidden):
    """A write sent to a mirror: it takes none; ``details.origin`` is where to send it."""

    default_code = "READ_ONLY_MIRROR"


@dataclass
class MirrorState:
    """What a mirror's follower last saw (``api/mirror.py`` keeps it up to date)."""

    origin: str
    origin_size: int = 0
    synced: bool = False  # caught up with the origin's checkpoint at least once
    error: str | None = None  # why the follower stopped
    failure: Exception | None = None  # the typed error it stopped with
    #: stops the server once the follower has stopped (set by whoever runs it)
    stop: Callable[[], None] | None = field(default=None, repr=False)


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
    _behind: Published | None = field(default=None, init=False, repr=False)

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
        if self.published is not None:
            published = self.published.load()
            if published is not None and await self.storage.log_size() < published.size:
                self._behind = published

    async def behind(self) -> Published | None:
        """The published checkpoint the database has not caught up with yet, if any.  Once
        behind, every call looks again: ``alexandria restore --catch-up`` fills the database
        from another process while this one serves reads."""
        published = self._behind
        if published is not None and await self.storage.log_size() >= published.size:
            self._behind = published = None
        return published

    async def check_writable(self) -> None:
        """Refuse a write on a mirror (403, naming the origin) or while the database is behind
        the checkpoint this library published (503, saying how to catch up)."""
        if self.mirror is not None:
            raise ReadOnlyMirror(
                f"this is a read-only mirror of {self.mirror.origin}: send writes there",
                origin=self.mirror.origin,
            )
        published = await self.behind()
        if published is not None:
            size = await self.storage.log_size()
            raise CatchUpRequired(behind_message(published, size),
                                  published_size=published.size, tree_size=size)

    async def admit_authority(self, body: bytes) -> AuthorityAdmitted:
        """Admit the authority document ``body`` (at most 64 KiB, ``api.http.read_body``):
        parsed off the event loop (strict JSON of a hostile body costs milliseconds), its
        signatures verified before the writer (``LedgerStorage.admit_authority``)."""
        await self.check_writable()
        document = await asyncio.to_thread(parse_json, body)
        return await self.storage.admit_authority(document)

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
        published = await self.behind()
        if published is not None:
            reasons.append(f"catching up: the database holds {size} of the {published.size}"
                           " leaves this library published")
        mirror = self.mirror
        if mirror is not None:
            if mirror.error is not None:
                reasons.append(f"the mirror stopped following {mirror.origin}: {mirror.error}")
            elif not mirror.synced:
                reasons.append(f"catching up with {mirror.origin}: {size} of"
                               f" {mirror.origin_size} leaves")
        return Status(not reasons, tuple(reasons), size, cp_size, age,
                      mirror.origin if mirror else None, mirror.origin_size if mirror else None)

    async def close(self) -> None:
        if self.writer is not None:
            await self.writer.close()
        await self.storage.close()

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        """Admit (or dry-run) a prepared envelope: here, or in the writer process."""
        await self.check_writable()
        if self.writer is not None:
            return await self.writer.admit(cand, dry_run)
        return await self.storage.admit(cand, dry_run)

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
        if self.writer is not None:
            return await self.writer.admit_many(cands, dry_run)
        return await self.storage.admit_many(cands, dry_run)


def load_genesis(path: str | Path) -> Genesis:
    return Genesis.from_document(orjson.loads(Path(path).read_bytes()))
