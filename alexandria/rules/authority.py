"""Authority rules: who may sign what, checked the same way by every checker.

- step 4 of PROTOCOL §4, the authority chain of a contribution (:func:`check_authority`);
- step 6, the scope a kind needs (:data:`SCOPE_OF_KIND`, :func:`check_scope`);
- ``POST /api/authority``: admitting an authority certificate or a revocation
  (:func:`check_authority_document`, :func:`check_revocation`, PROTOCOL §2.5–2.6);
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
    WorkerCertificate,
    document_name,
    parse_revocation,
)
from alexandria.errors import BadRequest, Forbidden, ServiceError
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


class AuthorityRefused(Forbidden):
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
    state: AuthorityView, document: Any, genesis: Genesis, now_ms: int
) -> Revocation:
    """A revocation submitted to ``POST /api/authority``, authorised against the ledger: an
    authority key (one holding an admitted authority certificate) is revoked by the root
    threshold; any other key, a worker key, by one authority that may sign worker certificates
    now (PROTOCOL §2.5–2.6).  It takes effect for the certificates its signer issued
    (``StateView.revoked``)."""

    def may_sign(key: str) -> bool:
        return not state.revoked(key, None) and any(
            NATIVE_ROLE in a.roles and a.valid_at(now_ms) for _seq, a in state.authorities(key)
        )

    return parse_revocation(
        document, genesis, may_sign, lambda key: bool(state.authorities(key))
    )


@dataclass(frozen=True)
class AuthorityVerdict:
    """What storage needs to admit an authority document: its type (``certificate`` or
    ``revocation``), its canonical bytes ``data`` = ``JCS(document)`` (the leaf's document,
    ``core.leaf``), and exactly one of the parsed certificate or revocation.  ``retry_of``: the
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


def check_authority_document(
    state: StateView, document: Any, genesis: Genesis, now_ms: int
) -> AuthorityVerdict:
    """The verdict on a document sent to ``POST /api/authority``, at admission time
    ``now_ms``.  In order:

    1. the document is a signed ``certificate`` or ``revocation`` (else 400 ``BAD_DOCUMENT``);
       a certificate is an authority certificate (a worker certificate: 400
       ``NOT_AN_AUTHORITY_DOCUMENT``);
    2. a certificate: its shape, genesis and root signatures (``AuthorityCertificate``); an
       exact retry of an admitted one is answered as such; its key was not revoked by root
       (403 ``AUTHORITY_REVOKED``);
    3. a revocation: its shape, genesis and signer (:func:`check_revocation`), then an exact
       retry is answered as such.
    """
    name = document_name(document)
    if name == "certificate":
        payload = document["certificate"]
        if isinstance(payload, dict) and payload.get("format") != AUTHORITY_FORMAT:
            # not a document this route admits: a shape error (400), like any other
            raise BadRequest(
                f"only {AUTHORITY_FORMAT} documents are admitted here; worker certificates"
                " travel inside envelopes", "NOT_AN_AUTHORITY_DOCUMENT",
                allowed=[AUTHORITY_FORMAT, REVOCATION_FORMAT],
            )
        cert = AuthorityCertificate.from_document(document, genesis)
        data = canonical(cert.document)
        retry = state.document_admitted(name, cert.key, data)
        if retry is not None:
            return AuthorityVerdict(name, data, certificate=cert, retry_of=retry)
        if state.revoked(cert.key, None):
            raise AuthorityRefused("that key was revoked by root", "AUTHORITY_REVOKED",
                                   key=cert.key)
        return AuthorityVerdict(name, data, certificate=cert)
    if name == "revocation":
        rev = check_revocation(state, document, genesis, now_ms)
        data = canonical(rev.document)
        retry = state.document_admitted(name, rev.key, data)
        return AuthorityVerdict(name, data, revocation=rev, retry_of=retry)
    raise BadRequest(
        f"a {name!r} document is not admitted here: send an authority certificate or a"
        " revocation", "BAD_DOCUMENT", allowed=["certificate", "revocation"],
    )


# --- the log key -----------------------------------------------------------------------------


class LogUnavailable(ServiceError):
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
