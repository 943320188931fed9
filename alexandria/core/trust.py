"""The trust chain: genesis → authority certificate → worker certificate → contribution
(PROTOCOL §2).

Every signed document has one shape, ``{NAME: PAYLOAD, "signatures": [{"key", "signature"}]}``,
each signature over ``JCS(PAYLOAD)``; unknown fields anywhere are refused.  This module does no IO:
it turns documents into verified values.  Whether an authority certificate has been *admitted*
and whether a key has been *revoked* depends on the ledger's state; ``rules.authority``
decides that from what storage reports.

Steps, in order, for every document:
1. shape: exactly the document name and ``signatures``; each signature exactly ``key`` and
   ``signature`` as lowercase hex, each key at most once (403 ``DUPLICATE_SIGNATURE``,
   refused unverified);
2. payload: exactly the fields of its ``format``, each of its type;
3. genesis: the payload names the pinned genesis;
4. signatures: enough distinct, valid signatures by the keys allowed to sign it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from alexandria.core.cache import Bounded
from alexandria.core.canonical import canonical, canonical_parsed, sha256_hex
from alexandria.core.keys import HEX64, HEX128, SigningKey, verify
from alexandria.core.timestamps import parse_ms
from alexandria.errors import AlexandriaError, Malformed, NotPermitted

GENESIS_FORMAT = "alexandria.genesis/1"
AUTHORITY_FORMAT = "alexandria.authority-certificate/1"
WORKER_FORMAT = "alexandria.worker-certificate/1"
REVOCATION_FORMAT = "alexandria.revocation/1"

ROLES = ("log", "native-application")
SCOPES = ("library.comment", "library.curate", "library.publish", "library.vote")
_ORIGIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]*(:[0-9]{1,5})?(/[A-Za-z0-9._~\-]+)*\Z")


class CertificateInvalid(NotPermitted):
    default_code = "CERTIFICATE_INVALID"


class DocumentShape(Malformed):
    default_code = "BAD_DOCUMENT"


# --- documents -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signed:
    """A signed document: its name, its payload and the signatures over ``JCS(payload)``."""

    name: str
    payload: Mapping[str, Any]
    signatures: tuple[tuple[str, str], ...]
    payload_bytes: bytes = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            self.name: self.payload,
            "signatures": [{"key": k, "signature": s} for k, s in self.signatures],
        }

    def valid_signers(self, allowed: Iterable[str]) -> set[str]:
        allowed_set = set(allowed)
        return {
            k for k, s in self.signatures if k in allowed_set and verify(k, s, self.payload_bytes)
        }


def sign_document(
    name: str, payload: Mapping[str, Any], keys: Iterable[SigningKey]
) -> dict[str, Any]:
    data = canonical(payload)
    return {
        name: dict(payload),
        "signatures": [{"key": k.public_hex, "signature": k.sign(data)} for k in keys],
    }


def document_name(doc: Any) -> str:
    """The name of a signed document (``certificate``, ``revocation``, ``genesis``)."""
    if not isinstance(doc, dict) or "signatures" not in doc or len(doc) != 2:
        raise DocumentShape(
            'a signed document is {NAME: PAYLOAD, "signatures": [...]}', "BAD_DOCUMENT"
        )
    return str(next(k for k in doc if k != "signatures"))


def parse_signed(doc: Any, name: str, error: type[AlexandriaError] = DocumentShape) -> Signed:
    """Step 1: the document's shape."""
    if not isinstance(doc, dict) or set(doc) != {name, "signatures"}:
        raise error(
            f'expected a document with exactly "{name}" and "signatures"',
            "BAD_DOCUMENT",
            expected=[name, "signatures"],
        )
    payload, sigs = doc[name], doc["signatures"]
    if not isinstance(payload, dict):
        raise error(f"{name} must be an object", "BAD_DOCUMENT", pointer=f"/{name}")
    if not isinstance(sigs, list) or not sigs:
        raise error("signatures must be a non-empty list", "BAD_DOCUMENT", pointer="/signatures")
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, s in enumerate(sigs):
        if (
            not isinstance(s, dict)
            or set(s) != {"key", "signature"}
            or not isinstance(s["key"], str)
            or not isinstance(s["signature"], str)
            or not HEX64.match(s["key"])
            or not HEX128.match(s["signature"])
        ):
            raise error(
                "each signature is exactly {key: 64 hex, signature: 128 hex}",
                "BAD_SIGNATURE_ENTRY",
                pointer=f"/signatures/{i}",
            )
        if s["key"] in seen:
            # a document counts distinct signers (PROTOCOL §2): a second signature by a key
            # adds nothing but verification work, so it is refused before anything is
            # verified — as the signature failure it is (PROTOCOL §6: 403), whatever else the
            # document holds, so that a key signing twice towards a threshold is answered as
            # a threshold not met always was
            raise NotPermitted(
                f"key {s['key']} signs the document twice: each key signs at most once",
                "DUPLICATE_SIGNATURE", pointer=f"/signatures/{i}", key=s["key"],
            )
        seen.add(s["key"])
        out.append((s["key"], s["signature"]))
    try:
        payload_bytes = canonical_parsed(payload)
    except AlexandriaError as exc:
        raise error(f"{name}: {exc.message}", "BAD_DOCUMENT", pointer=f"/{name}") from exc
    return Signed(name, payload, tuple(out), payload_bytes)


def _fields(
    payload: Mapping[str, Any], expected: Mapping[str, str], what: str,
    error: type[AlexandriaError] = CertificateInvalid,
) -> None:
    """Step 2: exactly the expected fields, each of its type.  ``error``: a worker certificate
    is a credential inside an envelope (403); a document posted to ``/api/authority`` whose
    payload has the wrong fields is not a document shape (400)."""
    keys = set(payload)
    if keys != set(expected):
        raise error(
            f"{what} must have exactly the fields {sorted(expected)}",
            "CERTIFICATE_FIELDS",
            unknown=sorted(keys - set(expected)),
            missing=sorted(set(expected) - keys),
        )
    for k, kind in expected.items():
        v = payload[k]
        ok = {
            "str": isinstance(v, str),
            "hex": isinstance(v, str) and bool(HEX64.match(v)),
            "time": isinstance(v, str) and parse_ms(v) is not None,
            "list": isinstance(v, list) and all(isinstance(x, str) for x in v),
            "int": isinstance(v, int) and not isinstance(v, bool),
        }[kind]
        if not ok:
            raise error(
                f"{what}: field {k} must be {kind}", "CERTIFICATE_FIELDS", pointer=f"/{k}"
            )


def _window(payload: Mapping[str, Any], what: str) -> tuple[int, int]:
    nb, na = parse_ms(payload["not_before"]), parse_ms(payload["not_after"])
    assert nb is not None and na is not None
    if nb > na:
        raise CertificateInvalid(f"{what}: not_before is after not_after", "CERTIFICATE_WINDOW")
    return nb, na


def _sorted_unique(
    values: list[str], allowed: tuple[str, ...], what: str, field_name: str,
    error: type[AlexandriaError] = CertificateInvalid,
) -> None:
    if not values or values != sorted(set(values)) or not set(values) <= set(allowed):
        raise error(
            f"{what}: {field_name} must be a sorted, unique, non-empty subset of {list(allowed)}",
            "CERTIFICATE_FIELDS",
            pointer=f"/{field_name}",
            allowed=list(allowed),
        )


# --- genesis ---------------------------------------------------------------------------------


class CertificateMemo:
    """Worker certificates already checked against one genesis, held by that ``Genesis``
    (whose lifetime it shares): ``certificates`` by the document's exact bytes, and the
    authority's signature verdicts by signed payload.  The checks are pure functions of the
    document and the genesis, so a hit answers exactly what a fresh check would."""

    CERTIFICATES = 4096
    SIGNATURES = 1024

    def __init__(self) -> None:
        self.certificates: Bounded[bytes, WorkerCertificate] = Bounded(self.CERTIFICATES)
        self.signatures: Bounded[tuple[bytes, tuple[tuple[str, str], ...]], bool] = Bounded(
            self.SIGNATURES
        )



@dataclass(frozen=True)
class Genesis:
    library: str
    origin: str
    created_at: str
    root_keys: tuple[str, ...]
    threshold: int
    pin: str
    document: Mapping[str, Any] = field(repr=False)
    memo: CertificateMemo = field(default_factory=CertificateMemo, repr=False, compare=False)

    @classmethod
    def from_document(cls, doc: Any, pin: str | None = None) -> Genesis:
        signed = parse_signed(doc, "genesis")
        p = signed.payload
        _fields(
            p,
            {
                "format": "str",
                "library": "str",
                "origin": "str",
                "created_at": "time",
                "root_keys": "list",
                "threshold": "int",
            },
            "genesis",
        )
        if p["format"] != GENESIS_FORMAT:
            raise CertificateInvalid(f"genesis format must be {GENESIS_FORMAT}", "BAD_FORMAT")
        keys = p["root_keys"]
        if not keys or len(set(keys)) != len(keys) or not all(HEX64.match(k) for k in keys):
            raise CertificateInvalid("root_keys must be distinct 64-hex keys", "GENESIS_INVALID")
        if not 1 <= p["threshold"] <= len(keys):
            raise CertificateInvalid("threshold must be 1..len(root_keys)", "GENESIS_INVALID")
        if not p["library"] or not _ORIGIN.match(p["origin"]):
            raise CertificateInvalid(
                "library must be non-empty and origin a schema-less URL", "GENESIS_INVALID"
            )
        actual_pin = sha256_hex(signed.payload_bytes)
        if pin is not None and pin != actual_pin:
            raise CertificateInvalid(
                "genesis does not match the pinned hash", "GENESIS_PIN_MISMATCH",
                expected=pin, actual=actual_pin,
            )
        signers = signed.valid_signers(keys)
        if len(signers) < p["threshold"]:
            raise CertificateInvalid(
                f"genesis signed by {len(signers)}/{p['threshold']} root keys",
                "GENESIS_SIGNATURES",
            )
        return cls(
            p["library"], p["origin"], p["created_at"], tuple(keys), p["threshold"], actual_pin,
            signed.to_json(),
        )


def make_genesis(
    library: str, origin: str, created_at: str, roots: list[SigningKey], threshold: int
) -> dict[str, Any]:
    payload = {
        "format": GENESIS_FORMAT,
        "library": library,
        "origin": origin,
        "created_at": created_at,
        "root_keys": [k.public_hex for k in roots],
        "threshold": threshold,
    }
    return sign_document("genesis", payload, roots)


def _genesis_of(payload: Mapping[str, Any], genesis: Genesis, what: str) -> None:
    if payload["genesis"] != genesis.pin:
        raise CertificateInvalid(
            f"{what} names another genesis", "GENESIS_MISMATCH",
            expected=genesis.pin, actual=payload["genesis"],
        )


# --- authority certificates ------------------------------------------------------------------


@dataclass(frozen=True)
class AuthorityCertificate:
    key: str
    roles: tuple[str, ...]
    not_before: int
    not_after: int
    document: Mapping[str, Any] = field(repr=False)

    def valid_at(self, ms: int) -> bool:
        return self.not_before <= ms <= self.not_after

    @classmethod
    def from_document(cls, doc: Any, genesis: Genesis) -> AuthorityCertificate:
        signed = parse_signed(doc, "certificate")
        p = signed.payload
        _fields(
            p,
            {
                "format": "str", "genesis": "hex", "key": "hex", "roles": "list",
                "not_before": "time", "not_after": "time",
            },
            "authority certificate",
            DocumentShape,
        )
        if p["format"] != AUTHORITY_FORMAT:
            raise DocumentShape(f"format must be {AUTHORITY_FORMAT}", "BAD_FORMAT")
        _sorted_unique(p["roles"], ROLES, "authority certificate", "roles", DocumentShape)
        _genesis_of(p, genesis, "authority certificate")
        nb, na = _window(p, "authority certificate")
        signers = signed.valid_signers(genesis.root_keys)
        if len(signers) < genesis.threshold:
            raise CertificateInvalid(
                f"authority certificate signed by {len(signers)}/{genesis.threshold} root keys",
                "AUTHORITY_SIGNATURES",
                valid=len(signers), threshold=genesis.threshold,
            )
        return cls(p["key"], tuple(p["roles"]), nb, na, signed.to_json())


def make_authority_certificate(
    genesis: Genesis, key: str, roles: list[str], not_before: str, not_after: str,
    roots: list[SigningKey],
) -> dict[str, Any]:
    payload = {
        "format": AUTHORITY_FORMAT, "genesis": genesis.pin, "key": key, "roles": sorted(roles),
        "not_before": not_before, "not_after": not_after,
    }
    return sign_document("certificate", payload, roots)


# --- worker certificates ---------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerCertificate:
    actor: str
    worker: str
    scopes: tuple[str, ...]
    authority: str
    not_before: int
    not_after: int
    document: Mapping[str, Any] = field(repr=False)

    def valid_at(self, ms: int) -> bool:
        return self.not_before <= ms <= self.not_after


def parse_worker_certificate(doc: Any, genesis: Genesis) -> WorkerCertificate:
    """Stateless checks of a worker certificate, including the authority's signature.  Whether
    that authority is certified, valid now and unrevoked is a question for the ledger state.

    Most envelopes carry a certificate seen before; the verdict is a pure function of the
    document and the genesis, so it is memoised on the document's exact bytes, in the
    genesis's own ``CertificateMemo``."""
    memo = genesis.memo
    try:
        key = orjson.dumps(doc)
    except TypeError:  # float markers and the like: no fast path
        key = None
    if key is not None:
        cached = memo.certificates.get(key)
        if cached is not None:
            return cached
    signed = parse_signed(doc, "certificate", CertificateInvalid)
    cert = _verify_worker(signed.payload_bytes, signed, genesis.pin, memo)
    if key is not None:
        memo.certificates[key] = cert
    return cert


def _verify_worker(
    payload_bytes: bytes, signed: Signed, pin: str, memo: CertificateMemo
) -> WorkerCertificate:
    p = signed.payload
    _fields(
        p,
        {
            "format": "str", "genesis": "hex", "actor": "hex", "worker": "hex", "scopes": "list",
            "authority": "hex", "not_before": "time", "not_after": "time",
        },
        "worker certificate",
    )
    if p["format"] != WORKER_FORMAT:
        raise CertificateInvalid(f"format must be {WORKER_FORMAT}", "BAD_FORMAT")
    if p["genesis"] != pin:
        raise CertificateInvalid(
            "worker certificate names another genesis", "GENESIS_MISMATCH", expected=pin
        )
    _sorted_unique(p["scopes"], SCOPES, "worker certificate", "scopes")
    nb, na = _window(p, "worker certificate")
    if len(signed.signatures) != 1 or signed.signatures[0][0] != p["authority"]:
        raise CertificateInvalid(
            "a worker certificate carries exactly one signature, by its authority key",
            "CERTIFICATE_SIGNATURE",
        )
    verified = memo.signatures.get((payload_bytes, signed.signatures))
    if verified is None:
        key, signature = signed.signatures[0]
        verified = memo.signatures[(payload_bytes, signed.signatures)] = verify(
            key, signature, payload_bytes
        )
    if not verified:
        raise CertificateInvalid(
            "worker certificate signature does not verify", "CERTIFICATE_SIGNATURE"
        )
    return WorkerCertificate(
        p["actor"], p["worker"], tuple(p["scopes"]), p["authority"], nb, na, signed.to_json()
    )


def make_worker_certificate(
    genesis: Genesis, actor: str, worker: str, scopes: list[str], authority: SigningKey,
    not_before: str, not_after: str,
) -> dict[str, Any]:
    payload = {
        "format": WORKER_FORMAT, "genesis": genesis.pin, "actor": actor, "worker": worker,
        "scopes": sorted(set(scopes)), "authority": authority.public_hex,
        "not_before": not_before, "not_after": not_after,
    }
    return sign_document("certificate", payload, [authority])


# --- revocations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Revocation:
    """``signer`` is ``"root"`` for a root-threshold revocation (it revokes the key everywhere),
    or the authority key that signed it (it revokes the worker certificates that authority
    issued for the key)."""

    key: str
    reason: str
    signer: str
    document: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class RevocationClaim:
    """A revocation after its stateless checks (:func:`prepare_revocation`): its shape, its
    genesis, and which of its signatures verify.  Who may sign it depends on the ledger
    (:func:`authorise_revocation`), so every signature that could count was verified here,
    before the writer: those by root keys, and a lone signature (an authority's)."""

    key: str
    reason: str
    signatures: tuple[tuple[str, str], ...]
    verified: frozenset[str]
    document: Mapping[str, Any] = field(repr=False)


def prepare_revocation(doc: Any, genesis: Genesis) -> RevocationClaim:
    """The stateless part of a revocation: shape, fields, format, genesis, signatures.  A key
    signs at most once (``parse_signed``), so this verifies at most one signature per root key
    plus one."""
    signed = parse_signed(doc, "revocation")
    p = signed.payload
    _fields(
        p, {"format": "str", "genesis": "hex", "key": "hex", "reason": "str"}, "revocation",
        DocumentShape,
    )
    if p["format"] != REVOCATION_FORMAT:
        raise DocumentShape(f"format must be {REVOCATION_FORMAT}", "BAD_FORMAT")
    _genesis_of(p, genesis, "revocation")
    verified = signed.valid_signers(genesis.root_keys)
    if len(signed.signatures) == 1:
        verified |= signed.valid_signers([signed.signatures[0][0]])
    return RevocationClaim(p["key"], p["reason"], signed.signatures, frozenset(verified),
                           signed.to_json())


def parse_revocation(
    doc: Any, genesis: Genesis, is_authority: Callable[[str], bool],
    is_authority_key: Callable[[str], bool],
) -> Revocation:
    """:func:`prepare_revocation`, then :func:`authorise_revocation`."""
    return authorise_revocation(prepare_revocation(doc, genesis), genesis, is_authority,
                                is_authority_key)


def authorise_revocation(
    claim: RevocationClaim, genesis: Genesis, is_authority: Callable[[str], bool],
    is_authority_key: Callable[[str], bool],
) -> Revocation:
    """A revocation is signed like the certificate that certified the key (PROTOCOL §2.6):
    by the root threshold when the revoked key is an authority key, by one native-application
    authority (not the key itself) when it is a worker key.  ``is_authority_key(key)``: the key
    holds an admitted authority certificate, of any role; any other key is a worker key.
    ``is_authority(key)``: the key may sign now (an admitted native-application certificate,
    valid, not revoked).  No signature is verified here: ``claim.verified`` says which do."""
    key = claim.key
    if is_authority_key(key):
        roots = len(claim.verified & set(genesis.root_keys))
        if roots >= genesis.threshold:
            return Revocation(key, claim.reason, "root", claim.document)
        raise CertificateInvalid(
            f"{key} is an authority key: its revocation must be signed by"
            f" {genesis.threshold} root keys, and {roots} valid root signatures were found",
            "REVOCATION_SIGNATURES", key=key, threshold=genesis.threshold,
            root_signatures=roots,
        )
    if len(claim.signatures) == 1:
        signer = claim.signatures[0][0]
        if signer != key and is_authority(signer) and signer in claim.verified:
            return Revocation(key, claim.reason, signer, claim.document)
    raise CertificateInvalid(
        f"{key} holds no authority certificate, so it is revoked as a worker key: by the"
        " signature of the native-application authority that issued its certificate (root"
        " revokes authority keys)",
        "REVOCATION_SIGNATURES", key=key,
    )


def make_revocation(
    genesis: Genesis, key: str, reason: str, signers: list[SigningKey]
) -> dict[str, Any]:
    payload = {"format": REVOCATION_FORMAT, "genesis": genesis.pin, "key": key, "reason": reason}
    return sign_document("revocation", payload, signers)
