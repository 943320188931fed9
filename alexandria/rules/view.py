"""What the admission rules may ask of a ledger, and what they answer.

Every checker of the rules — the server's storage (``store.admission.WriteView``, inside its
write transaction), the offline replay (``audit.replay.Ledger``), the in-memory
``rules.memory.MemoryLedger`` — implements ``StateView``; the rules (``admission``,
``authority``, ``state``) read nothing else, so they reach the same verdict on the same facts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from alexandria.core.canonical import parse_json
from alexandria.core.records import Link
from alexandria.core.trust import AuthorityCertificate


@dataclass(frozen=True)
class RevisionFacts:
    """An admitted revision.  Most rules need only its identity and kind; the signed record
    itself is loaded on demand (``record``) for the few rules that read bodies and links."""

    id: str
    root: str
    kind: str
    author: str
    authored_ms: int
    record: Callable[[], Mapping[str, Any]] = field(repr=False, compare=False)

    @property
    def title(self) -> str:
        return str(self.record()["title"])

    @property
    def links(self) -> tuple[Link, ...]:
        return tuple(Link(lk["relation"], lk["target"]) for lk in self.record()["links"])

    def decoded(self) -> Any:
        return parse_json(self.record()["body"])


@dataclass(frozen=True)
class ObjectFacts:
    root: str
    kind: str
    author: str
    head: str
    depth: int
    feed_links: tuple[tuple[str, str], ...]


class AuthorityView(Protocol):
    """What the authority chain (step 4) asks: enough for a stateless checker that knows one
    admitted certificate and no revocations (``authority.check_signed_record``)."""

    def authorities(self, key: str) -> Sequence[tuple[int, AuthorityCertificate]]:
        """Admitted certificates of ``key`` with their admission sequences, oldest first."""
        ...

    def revoked(self, key: str, issuer: str | None) -> bool:
        """Revoked by root, or (``issuer`` given) by that authority."""
        ...


class StateView(AuthorityView, Protocol):
    """What the rules may ask of the ledger.  Implementations answer from inside the write
    transaction, so the answers hold until the verdict is stored."""

    def admitted(self, rev: str) -> int | None:
        """The log sequence of revision ``rev`` if it was admitted (step 0: exact retry)."""
        ...

    def document_admitted(self, kind: str, key: str, document: bytes) -> int | None:
        """The log sequence of the authority document ``document`` (its canonical bytes), a
        ``certificate`` or ``revocation`` of ``key``, if it was admitted (an exact retry)."""
        ...

    def revision(self, rev: str) -> RevisionFacts | None: ...

    def object(self, root: str) -> ObjectFacts | None: ...

    def vote_of(self, author: str, target_root: str) -> ObjectFacts | None: ...


@dataclass(frozen=True)
class Verdict:
    """What storage needs to admit a record."""

    id: str
    root: str
    kind: str
    author: str
    previous: str
    depth: int
    vote_target: str
    feed_links: tuple[tuple[str, str], ...]
    parent_roots: tuple[str, ...]
    link_roots: tuple[str, ...]
    authority_sequence: int


@dataclass(frozen=True)
class Retry:
    """Step 0's verdict: this exact record was admitted before, at ``sequence``; storage
    answers with the stored signed record (200) and writes nothing."""

    id: str
    root: str
    sequence: int


def object_after(v: Verdict, before: ObjectFacts | None) -> ObjectFacts:
    """The object's facts once ``v`` is admitted: a new object, or ``before`` with a new head.
    Both the server's memory and the replay update their facts through this."""
    if before is not None and v.previous:
        return ObjectFacts(before.root, before.kind, before.author, v.id, before.depth,
                           before.feed_links)
    return ObjectFacts(v.root, v.kind, v.author, v.id, v.depth, v.feed_links)
