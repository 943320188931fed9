"""Authority rules: who may sign what, checked the same way by every checker.

- step 4 of PROTOCOL §4, the authority chain of a contribution (:func:`check_authority`);
- step 6, the scope a kind needs (:data:`SCOPE_OF_KIND`, :func:`check_scope`);
- ``POST /api/authority``: admitting an authority certificate or a revocation
  (:func:`prepare_authority_document` before the writer, :func:`decide_authority_document`
  in it; :func:`check_authority_document` is both, PROTOCOL §2.5–2.6);
- the log key that may sign a checkpoint (:func:`check_log_key`, PROTOCOL §7).

The server's storage, the offline replay (``audit.replay``) and ``verify`` call these very
functions, so they refuse the same documents with the same codes.  Nothing here does IO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from alexandria.core.canonical import canonical
from alexandria.core.contract import write_contract
from alexandria.core.records import Record
from alexandria.core.timestamps import format_ms
from alexandria.core.trust import (
    AUTHORITY_FORMAT,
    REVOCATION_FORMAT,
    AuthorityCertificate,
    Genesis,
    Revocation,
    RevocationClaim,
    WorkerCertificate,
    authorise_revocation,
    document_name,
    prepare_revocation,
)
from alexandria.errors import Failed, Malformed, NotPermitted
from alexandria.rules.view import AuthorityView, StateView

NATIVE_ROLE = "native-application"
LOG_ROLE = "log"


def _scopes() -> dict[str, str]:
    """The write contract's ``scopes`` (scope → kinds) inverted; personal lists are
    published under ``library.publish`` (the contract's ``personal_lists``)."""
    out = {"personal-read": "library.publish", "personal-state": "library.publish"}
    for scope, kinds in write_contract()["scopes"].items():
        for kind in kinds:
            out[kind] = scope
    return out


SCOPE_OF_KIND: Mapping[str, str] = MappingProxyType(_scopes())
"""The scope a worker certificate must grant to sign a record of each kind."""


class AuthorityRefused(NotPermitted):
    default_code = "AUTHORITY_REFUSED"


# --- step 4: the authority chain -------------------------------------------------------------


def check_author(record: Record, cert: WorkerCertificate) -> None:
    """The record's author is the actor the worker certificate approves."""
    if record.author != cert.actor:
        raise AuthorityRefused(
            "record author is not the actor the worker certificate approves",
            "AUTHOR_NOT_CERTIFIED", author=record.author, actor=cert.actor,
        )


def check_authority(
    state: AuthorityView, record: Record, cert: WorkerCertificate, now_ms: int
) -> int:
    """Step 4: the admission sequence of the authority certificate that vouches for ``cert``
    at ``now_ms``.  In order: the author is the certified actor; the certificate's authority
    holds an admitted native-application certificate, is not revoked by root, and one of those
    certificates is valid now; the worker certificate is valid now and its key not revoked
    (by root or by its issuer)."""
    check_author(record, cert)
    admitted = [
        (seq, a) for seq, a in state.authorities(cert.authority) if NATIVE_ROLE in a.roles
    ]
    if not admitted:
        raise AuthorityRefused(
            "the worker certificate's authority holds no admitted native-application"
            " certificate", "AUTHORITY_UNKNOWN", authority=cert.authority,
        )
    if state.revoked(cert.authority, None):
        raise AuthorityRefused(
            "the authority key was revoked", "AUTHORITY_REVOKED", authority=cert.authority
        )
    valid = [seq for seq, a in admitted if a.valid_at(now_ms)]
    if not valid:
        raise AuthorityRefused(
            "the authority certificate is not valid now", "AUTHORITY_EXPIRED",
            authority=cert.authority,
        )
    if not cert.valid_at(now_ms):
        raise AuthorityRefused(
            "the worker certificate is not valid now", "CERTIFICATE_EXPIRED",
            not_before=cert.document["certificate"]["not_before"],
            not_after=cert.document["certificate"]["not_after"],
        )
    if state.revoked(cert.worker, cert.authority):
        raise AuthorityRefused("the worker key was revoked", "WORKER_REVOKED", worker=cert.worker)
    return valid[-1]


# --- step 6: scope ---------------------------------------------------------------------------


def check_scope(record: Record, cert: WorkerCertificate) -> None:
    """Step 6: the worker certificate's scopes grant the record's kind."""
    scope = SCOPE_OF_KIND[record.kind]
    if scope not in cert.scopes:
        raise AuthorityRefused(
            f"a {record.kind} needs the scope {scope}", "SCOPE_DENIED",
            required=scope, granted=list(cert.scopes),
        )


# --- authority documents ---------------------------------------------------------------------


def check_revocation(
    state: AuthorityView, claim: RevocationClaim, genesis: Genesis, now_ms: int
) -> Revocation:
    """A revocation submitted to ``POST /api/authority`` (its signatures verified by
    :func:`prepare_authority_document`), authorised against the ledger: an authority key (one
    holding an admitted authority certificate) is revoked by the root threshold; any other
    key, a worker key, by one authority that may sign worker certificates now (PROTOCOL
    §2.5–2.6).  It takes effect for the certificates its signer issued
    (``StateView.revoked``)."""

    def may_sign(key: str) -> bool:
        return not state.revoked(key, None) and any(
            NATIVE_ROLE in a.roles and a.valid_at(now_ms) for _seq, a in state.authorities(key)
        )

    return authorise_revocation(claim, genesis, may_sign, lambda key: bool(state.authorities(key)))


@dataclass(frozen=True)
class AuthorityDocument:
    """A document sent to ``POST /api/authority`` after every check that needs no ledger
    state (:func:`prepare_authority_document`): its type (``certificate`` or ``revocation``),
    its canonical bytes ``data`` = ``JCS(document)`` (the leaf's document, ``core.leaf``), and
    exactly one of the verified certificate or the revocation claim."""

    type: str
    data: bytes = field(repr=False)
    certificate: AuthorityCertificate | None = None
    revocation: RevocationClaim | None = None


@dataclass(frozen=True)
class AuthorityVerdict:
    """What storage needs to admit an authority document: its type, its canonical bytes
    ``data``, and exactly one of the parsed certificate or revocation.  ``retry_of``: the
    sequence at which this very document was admitted before (an exact retry: store nothing,
    answer 200)."""

    type: str
    data: bytes = field(repr=False)
    certificate: AuthorityCertificate | None = None
    revocation: Revocation | None = None
    retry_of: int | None = None

    @property
    def document(self) -> Mapping[str, Any]:
        if self.certificate is not None:
            return self.certificate.document
        assert self.revocation is not None
        return self.revocation.document


def prepare_authority_document(document: Any, genesis: Genesis) -> AuthorityDocument:
    """Every stateless check of a document sent to ``POST /api/authority``, in order; the
    server runs it before the writer, off the event loop, so that signature work never holds
    the single writer.  A key signs at most once (``core.trust.parse_signed``), so
    a document costs at most one Ed25519 verification per root key, plus one.

    1. the document is a signed ``certificate`` or ``revocation`` (else 400 ``BAD_DOCUMENT``;
       a key signing twice: 403 ``DUPLICATE_SIGNATURE``); a certificate is an authority
       certificate (a worker certificate: 400 ``NOT_AN_AUTHORITY_DOCUMENT``);
    2. a certificate: its shape, genesis and root signatures (``AuthorityCertificate``, 403
       ``AUTHORITY_SIGNATURES``);
    3. a revocation: its shape and genesis, and which of its signatures verify
       (``core.trust.prepare_revocation``); who may sign it is the ledger's question.
    """
    name = document_name(document)
    if name == "certificate":
        payload = document["certificate"]
        if isinstance(payload, dict) and payload.get("format") != AUTHORITY_FORMAT:
            # not a document this route admits: a shape error (400), like any other
            raise Malformed(
                f"only {AUTHORITY_FORMAT} documents are admitted here; worker certificates"
                " travel inside envelopes", "NOT_AN_AUTHORITY_DOCUMENT",
                allowed=[AUTHORITY_FORMAT, REVOCATION_FORMAT],
            )
        cert = AuthorityCertificate.from_document(document, genesis)
        return AuthorityDocument(name, canonical(cert.document), certificate=cert)
    if name == "revocation":
        claim = prepare_revocation(document, genesis)
        return AuthorityDocument(name, canonical(claim.document), revocation=claim)
    raise Malformed(
        f"a {name!r} document is not admitted here: send an authority certificate or a"
        " revocation", "BAD_DOCUMENT", allowed=["certificate", "revocation"],
    )


def decide_authority_document(
    state: StateView, prepared: AuthorityDocument, genesis: Genesis, now_ms: int
) -> AuthorityVerdict:
    """The verdict on a prepared authority document at admission time ``now_ms``, from the
    ledger state, verifying no signature.  A certificate: an exact retry of an admitted one is
    answered as such, then its key must not have been revoked by root (403
    ``AUTHORITY_REVOKED``).  A revocation: its signer (:func:`check_revocation`, 403
    ``REVOCATION_SIGNATURES``), then an exact retry is answered as such."""
    name, data = prepared.type, prepared.data
    if prepared.certificate is not None:
        cert = prepared.certificate
        retry = state.document_admitted(name, cert.key, data)
        if retry is not None:
            return AuthorityVerdict(name, data, certificate=cert, retry_of=retry)
        if state.revoked(cert.key, None):
            raise AuthorityRefused("that key was revoked by root", "AUTHORITY_REVOKED",
                                   key=cert.key)
        return AuthorityVerdict(name, data, certificate=cert)
    assert prepared.revocation is not None
    rev = check_revocation(state, prepared.revocation, genesis, now_ms)
    retry = state.document_admitted(name, rev.key, data)
    return AuthorityVerdict(name, data, revocation=rev, retry_of=retry)


def check_authority_document(
    state: StateView, document: Any, genesis: Genesis, now_ms: int
) -> AuthorityVerdict:
    """:func:`prepare_authority_document` then :func:`decide_authority_document`: what the
    offline replay and ``verify`` run for each authority document of a log, the very checks
    the server ran in two parts."""
    return decide_authority_document(
        state, prepare_authority_document(document, genesis), genesis, now_ms
    )


# --- the log key -----------------------------------------------------------------------------


class LogUnavailable(Failed):
    """The log cannot sign the checkpoint a reader needs (503): no log key, or a key without
    a valid admitted ``log`` certificate.  Persisted checkpoints stay readable."""

    default_code = "LOG_KEY_NOT_CERTIFIED"


def check_log_key(
    certificates: Sequence[tuple[int, AuthorityCertificate]], revoked: bool, key: str,
    at_ms: int,
) -> int:
    """The admission sequence of the ``log`` certificate that lets ``key`` sign a checkpoint
    whose last leaf was admitted at ``at_ms``, given the key's admitted certificates (oldest
    first) and whether root revoked it.  The server checks this before signing and the offline
    verifier checks it again on its replayed ledger."""
    certs = [(seq, c) for seq, c in certificates if LOG_ROLE in c.roles]
    if not certs:
        raise LogUnavailable(
            "the log key holds no admitted authority certificate with role log: admit one"
            " through POST /api/authority", "LOG_KEY_NOT_CERTIFIED", key=key,
        )
    if revoked:
        raise LogUnavailable("the log key was revoked by root", "LOG_KEY_REVOKED", key=key)
    valid = [seq for seq, c in certs if c.valid_at(at_ms)]
    if not valid:
        raise LogUnavailable(
            "no log certificate of this key is valid at the last leaf's admission time",
            "LOG_KEY_EXPIRED", key=key, at=format_ms(at_ms),
        )
    return valid[-1]
