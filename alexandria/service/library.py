"""A running library: its pinned genesis, its storage and its log key.  The HTTP app and the
operator commands share this object; nothing else holds global state."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from alexandria.core.keys import SigningKey
from alexandria.core.trust import Genesis
from alexandria.reads.changes import DEFAULT_LIMITS, Limits
from alexandria.rules.admission import Candidate
from alexandria.service.checkpoint_signer import CheckpointSigner
from alexandria.service.cosigning import Cosigning
from alexandria.service.writer_service import WriterClient
from alexandria.store.interface import Admitted, DryRun
from alexandria.store.sqlite import SqliteStorage


@dataclass
class Library:
    genesis: Genesis
    storage: SqliteStorage
    log_key: SigningKey | None = None
    writer: WriterClient | None = None  # the writer process of a multi-process server
    #: ``/api/changes`` page bounds (PROTOCOL §5); tests set smaller ones
    limits: Limits = DEFAULT_LIMITS
    #: the witnesses asked to cosign each new checkpoint (``--witness``), and the quorum
    #: ``GET /api/log/checkpoint`` waits for before serving a checkpoint
    cosigning: Cosigning = field(default_factory=Cosigning)
    #: signs this library's checkpoints; concurrent requests share one signing
    checkpoints: CheckpointSigner = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.checkpoints = CheckpointSigner(self)
        self.checkpoints.listeners.append(self.cosigning.signed)

    @classmethod
    def from_files(
        cls, genesis_path: str | Path, db_path: str | Path, log_key_path: str | Path | None = None
    ) -> Library:
        genesis = load_genesis(genesis_path)
        log_key = SigningKey.load(log_key_path) if log_key_path else None
        return cls(genesis, SqliteStorage(db_path, genesis), log_key)

    async def open(self) -> None:
        await self.storage.open()
        if self.writer is not None:
            await self.writer.connect()

    async def close(self) -> None:
        if self.writer is not None:
            await self.writer.close()
        await self.storage.close()

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun:
        """Admit (or dry-run) a prepared envelope: here, or in the writer process."""
        if self.writer is not None:
            return await self.writer.admit(cand, dry_run)
        return await self.storage.admit(cand, dry_run)


def load_genesis(path: str | Path) -> Genesis:
    return Genesis.from_document(orjson.loads(Path(path).read_bytes()))
