"""The storage interface the rest of the package relies on.

The rules never see storage: they get a ``rules.view.StateView``.  A backend provides that view
*inside* its write transaction, serialises admissions (exactly one of two concurrent revisions of
the same head wins, also across processes), and makes every acknowledged admission durable.
SQLite (``store/sqlite.py``) is the embedded default; a PostgreSQL backend implements the same
class with ``SELECT … FOR UPDATE`` / serialisable transactions and leaves the rules untouched.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from alexandria.core.trust import Genesis
from alexandria.rules.admission import Candidate


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


class Storage(ABC):
    genesis: Genesis

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted | DryRun: ...

    @abstractmethod
    async def admit_authority(self, document: Any) -> AuthorityAdmitted: ...

    @abstractmethod
    async def authority_documents(self) -> list[dict[str, Any]]: ...

    @abstractmethod
    async def entry(self, rev: str) -> bytes | None:
        """``JCS(signed record)`` of a revision."""

    @abstractmethod
    async def head_entry(self, rev: str) -> bytes | None:
        """``JCS(signed record)`` of the current head of the object ``rev`` belongs to."""

    @abstractmethod
    async def log_size(self) -> int: ...
