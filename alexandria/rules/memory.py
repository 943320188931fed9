"""A ledger's rule facts held in memory: the ``StateView`` of the offline replay
(``audit.replay.Ledger``) and of the pure rule tests.

It keeps exactly the facts the rules ask about — revisions, objects and their heads, votes,
authority certificates, revocations, the leaves of admitted authority documents — and updates
them from the rules' verdicts, as the server's storage does in its tables
(``store/admission.store_contribution`` and ``admit_authority``).  Record bytes
are kept in ``records`` (``sequence → JCS(record)``); a subclass may move them elsewhere and
override :meth:`record_bytes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from alexandria.core.records import Record
from alexandria.core.trust import AuthorityCertificate
from alexandria.rules.authority import AuthorityVerdict
from alexandria.rules.view import ObjectFacts, RevisionFacts, Verdict, object_after


class MemoryLedger:
    """``StateView`` over facts in dictionaries; ``store_*`` apply a verdict admitted at a
    log sequence."""

    def __init__(self) -> None:
        self._revisions: dict[str, tuple[int, str, str, str, int]] = {}
        self._objects: dict[str, ObjectFacts] = {}
        self._votes: dict[tuple[str, str], str] = {}
        self._authorities: dict[str, list[tuple[int, AuthorityCertificate]]] = {}
        self._revocations: dict[str, set[str]] = {}
        self._documents: dict[bytes, int] = {}
        self.records: dict[int, bytes] = {}

    # --- StateView ---------------------------------------------------------------------------

    def admitted(self, rev: str) -> int | None:
        found = self._revisions.get(rev)
        return None if found is None else found[0]

    def document_admitted(self, kind: str, key: str, document: bytes) -> int | None:
        return self._documents.get(document)

    def revision(self, rev: str) -> RevisionFacts | None:
        found = self._revisions.get(rev)
        if found is None:
            return None
        seq, root, kind, author, ms = found
        return RevisionFacts(rev, root, kind, author, ms, lambda: self.record_value(seq))

    def object(self, root: str) -> ObjectFacts | None:
        return self._objects.get(root)

    def vote_of(self, author: str, target_root: str) -> ObjectFacts | None:
        root = self._votes.get((author, target_root))
        return None if root is None else self._objects[root]

    def authorities(self, key: str) -> Sequence[tuple[int, AuthorityCertificate]]:
        return self._authorities.get(key, [])

    def revoked(self, key: str, issuer: str | None) -> bool:
        by = self._revocations.get(key)
        return by is not None and ("root" in by or (issuer is not None and issuer in by))

    def authority_keys(self, role: str) -> list[str]:
        """Keys holding an admitted certificate with ``role``, in order of first admission."""
        return [k for k, certs in self._authorities.items()
                if any(role in c.roles for _s, c in certs)]

    # --- records -----------------------------------------------------------------------------

    def record_bytes(self, seq: int) -> bytes:
        return self.records[seq]

    def record_value(self, seq: int) -> Mapping[str, Any]:
        value: dict[str, Any] = orjson.loads(self.record_bytes(seq))
        return value

    # --- applying verdicts -------------------------------------------------------------------

    def store_contribution(self, v: Verdict, rec: Record, seq: int) -> None:
        """The facts of contribution ``v`` (record ``rec``) admitted at ``seq``."""
        self.records[seq] = rec.canonical
        self._revisions[v.id] = (seq, v.root, v.kind, v.author, rec.authored_ms)
        self._objects[v.root] = object_after(v, self._objects.get(v.root))
        if v.vote_target and not v.previous:
            self._votes[(v.author, v.vote_target)] = v.root

    def store_authority(self, v: AuthorityVerdict, seq: int) -> None:
        """The facts of authority document ``v`` admitted at ``seq``."""
        if v.certificate is not None:
            self._authorities.setdefault(v.certificate.key, []).append((seq, v.certificate))
        else:
            assert v.revocation is not None
            self._revocations.setdefault(v.revocation.key, set()).add(v.revocation.signer)
        self._documents[v.data] = seq
