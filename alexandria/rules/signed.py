"""One signed record checked against the pinned genesis alone, with the server's codes.

A reader holding only the pinned genesis — ``alexandria get`` (``cli.session``) and
``alexandria verify --entry`` (``audit.verify``, step E3) — checks what a library returns with
this one function.  It runs the server's own steps on the record as the server admitted it:

1–3. ``admission.prepare`` on ``JCS({record, signature})``: record shape, the worker
     certificate signed by its authority, for the pinned genesis;
  *  the signed record's ``id`` is the hash of its record (``REVISION_MISMATCH``);
4.   ``authority.check_authority`` at the recorded admission time, against a ledger that
     holds exactly the admission's authority certificate (root-signed, checked here): the
     author is the certified actor, that certificate is the worker certificate's authority
     with role native-application, and both certificates were valid at admission;
5–7. the proof, scope and content schema ``prepare`` deferred.

What needs the whole log — revocations, the state rules, that the authority certificate was
admitted before the entry — is left to the replay (``audit.replay``) or to the inclusion
proofs of ``verify --entry``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from alexandria.core.canonical import canonical
from alexandria.core.leaf import leaf_bytes
from alexandria.core.records import PUBLIC_KINDS
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.core.trust import AuthorityCertificate, Genesis
from alexandria.errors import Malformed, NotPermitted
from alexandria.rules.admission import Candidate, prepare
from alexandria.rules.authority import check_authority

SIGNED_FIELDS = frozenset(("admission", "id", "record", "root", "signature"))
ADMISSION_FIELDS = frozenset(("admitted_at", "authority", "sequence"))


class SignedRecordShape(Malformed):
    default_code = "SIGNED_RECORD_SHAPE"


class RevisionMismatch(NotPermitted):
    default_code = "REVISION_MISMATCH"


@dataclass(frozen=True)
class CheckedRecord:
    """A signed record that passed :func:`check_signed_record`."""

    candidate: Candidate
    authority: AuthorityCertificate
    sequence: int
    admitted_ms: int

    @property
    def id(self) -> str:
        return self.candidate.record.id

    @property
    def leaf(self) -> bytes:
        """``JCS({"admitted_at", "document": {record, signature}})``: the entry's log leaf,
        recomputed from the signed record alone (PROTOCOL §7)."""
        return leaf_bytes(format_ms(self.admitted_ms), self.candidate.document)


@dataclass(frozen=True)
class _OneAuthority:
    """The ``AuthorityView`` a lone signed record carries: its admission's certificate, and
    no revocations (those need the log)."""

    sequence: int
    certificate: AuthorityCertificate

    def authorities(self, key: str) -> Sequence[tuple[int, AuthorityCertificate]]:
        return [(self.sequence, self.certificate)] if key == self.certificate.key else []

    def revoked(self, key: str, issuer: str | None) -> bool:
        return False


def _shape(signed: Any) -> tuple[int, int]:
    """The signed record's fields and its admission's ``sequence`` and time."""
    if not isinstance(signed, dict) or set(signed) != SIGNED_FIELDS:
        raise SignedRecordShape(
            f"a signed record has exactly the fields {sorted(SIGNED_FIELDS)}",
            expected=sorted(SIGNED_FIELDS),
        )
    admission = signed["admission"]
    if not isinstance(admission, dict) or set(admission) != ADMISSION_FIELDS:
        raise SignedRecordShape(
            f"an admission has exactly the fields {sorted(ADMISSION_FIELDS)}",
            pointer="/admission", expected=sorted(ADMISSION_FIELDS),
        )
    sequence, at = admission["sequence"], admission["admitted_at"]
    admitted_ms = parse_ms(at) if isinstance(at, str) else None
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 1:
        raise SignedRecordShape("admission.sequence is a positive integer",
                                pointer="/admission/sequence")
    if admitted_ms is None:
        raise SignedRecordShape("admission.admitted_at is a timestamp",
                                pointer="/admission/admitted_at")
    return sequence, admitted_ms


def check_signed_record(
    signed: Any, genesis: Genesis, kinds: tuple[str, ...] = PUBLIC_KINDS
) -> CheckedRecord:
    """Check ``signed`` (``{admission, id, record, root, signature}`` as the read API serves
    it) against ``genesis`` in the order of the module docstring; raise the first failure with
    the code the server's admission gives it."""
    sequence, admitted_ms = _shape(signed)
    # 1–3, with 5–7 deferred
    cand = prepare(canonical({"record": signed["record"], "signature": signed["signature"]}),
                   genesis, kinds)
    if signed["id"] != cand.record.id:
        raise RevisionMismatch("the record does not hash to its id", id=signed["id"],
                               actual=cand.record.id)
    # 4, at admission time, with the admission's certificate as the only one admitted
    authority = AuthorityCertificate.from_document(signed["admission"]["authority"], genesis)
    check_authority(_OneAuthority(sequence, authority), cand.record, cand.certificate,
                    admitted_ms)
    # 5–7
    if cand.deferred is not None:
        raise cand.deferred
    return CheckedRecord(cand, authority, sequence, admitted_ms)
