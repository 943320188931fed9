"""Contribution records, envelopes, revision ids and signed records (PROTOCOL §3–4).

A *record* is what a worker signs; an *envelope* is ``{record, signature: {certificate, proof}}``
as the CLI sends it; a *signed record* is what reads return:
``{id, root, record, signature, admission}``.  Parsing is strict: exactly the known fields, and a
body string that is already in canonical form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from alexandria.core.canonical import (
    canonical,
    canonical_parsed,
    find_float,
    parse_json,
    sha256_hex,
)
from alexandria.core.keys import HEX64, HEX128, SigningKey
from alexandria.core.leaf import document_record, document_signature
from alexandria.core.timestamps import parse_ms
from alexandria.errors import AlexandriaError, Invalid, Malformed, NotPermitted, TooLarge

CONTRIBUTION_FORMAT = "alexandria.contribution/3"
RECORD_FIELDS = (
    "format", "genesis", "author", "authored_at", "kind", "title", "body", "links", "previous",
)
OBJECT_KINDS = (
    "space", "discussion", "claim", "document", "evidence", "assessment", "relationship",
    "proposal",
)
PUBLIC_KINDS = (*OBJECT_KINDS, "reply", "vote")
PERSONAL_KINDS = ("personal-read", "personal-state")
MAX_ENVELOPE_BYTES = 65_536
#: ``POST /api/entries/batch`` (PROTOCOL §4.1): lines and bytes of one request, its media type
MAX_BATCH_LINES = 1000
MAX_BATCH_BYTES = 8 * 1024 * 1024
NDJSON = "application/x-ndjson"
MAX_BODY_CHARACTERS = 48_000
_RELATION = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


class RecordInvalid(Invalid):
    default_code = "RECORD_INVALID"


class EnvelopeShape(Malformed):
    default_code = "BAD_ENVELOPE"


class GenesisMismatch(NotPermitted):
    default_code = "GENESIS_MISMATCH"


@dataclass(frozen=True)
class Link:
    relation: str
    target: str


@dataclass(frozen=True)
class Record:
    """A parsed, shape-checked record.  ``content`` is what the content schema validates."""

    raw: Mapping[str, Any] = field(repr=False)
    id: str
    canonical: bytes = field(repr=False)
    author: str
    authored_at: str
    authored_ms: int
    kind: str
    title: str
    body: str
    decoded_body: Any = field(repr=False)
    links: tuple[Link, ...]
    previous: str

    @property
    def content(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "body": self.decoded_body,
            "links": self.raw["links"],
            "previous": self.previous,
        }

    def targets(self, relation: str) -> list[str]:
        return [lk.target for lk in self.links if lk.relation == relation]


def body_is_json(kind: str) -> bool:
    """Whether a record of ``kind`` carries the canonical JSON encoding of an object as body."""
    return kind in OBJECT_KINDS or kind == "personal-state" or kind == "personal-read"


def decode_body(kind: str, body: str, base: str = "/record/body") -> Any:
    """The body as the content schema sees it: the decoded object for object kinds."""
    if not body_is_json(kind):
        return body
    try:
        value = parse_json(body)
    except AlexandriaError as exc:
        raise RecordInvalid(
            f"body of a {kind} must be the canonical JSON encoding of an object: {exc.message}",
            "NON_CANONICAL_BODY", pointer=base,
        ) from exc
    where = find_float(value, base)
    if where is not None:
        raise RecordInvalid(
            "floats and integers beyond ±(2^53-1) are not allowed", "FLOAT_NOT_ALLOWED",
            pointer=where,
        )
    expected = canonical_parsed(value).decode("utf-8")
    if expected != body:
        raise RecordInvalid(
            f"body of a {kind} must be in RFC 8785 canonical form", "NON_CANONICAL_BODY",
            pointer=base, expected=expected,
        )
    return value


def parse_record(value: Any, pin: str, kinds: tuple[str, ...] = PUBLIC_KINDS) -> Record:
    """Record shape: exactly the record fields, known kind, formats, timestamp syntax,
    canonical body string, no floats, body length.  Every failure is 422, except a well-formed
    record of another library's genesis (403), which is checked last."""
    if not isinstance(value, dict):
        raise RecordInvalid("record must be an object", "RECORD_SHAPE", pointer="/record")
    keys = set(value)
    if keys != set(RECORD_FIELDS):
        unknown, missing = sorted(keys - set(RECORD_FIELDS)), sorted(set(RECORD_FIELDS) - keys)
        code = "UNKNOWN_FIELD" if unknown else "MISSING_FIELD"
        raise RecordInvalid(
            f"record must have exactly the fields {list(RECORD_FIELDS)}", code,
            pointer=f"/record/{(unknown or missing)[0]}", unknown=unknown, missing=missing,
        )
    where = find_float(value, "/record")
    if where is not None:
        raise RecordInvalid(
            "floats and integers beyond ±(2^53-1) are not allowed", "FLOAT_NOT_ALLOWED",
            pointer=where,
        )
    for name in ("format", "genesis", "author", "authored_at", "kind", "title", "body", "previous"):
        if not isinstance(value[name], str):
            raise RecordInvalid(
                f"{name} must be a string", "RECORD_SHAPE", pointer=f"/record/{name}"
            )
    if value["format"] != CONTRIBUTION_FORMAT:
        raise RecordInvalid(
            f"format must be {CONTRIBUTION_FORMAT}", "BAD_FORMAT", pointer="/record/format",
            allowed=[CONTRIBUTION_FORMAT],
        )
    if value["kind"] not in kinds:
        raise RecordInvalid(
            f"unknown kind {value['kind']!r}", "UNKNOWN_KIND", pointer="/record/kind",
            allowed=list(kinds),
        )
    if not HEX64.match(value["genesis"]):
        raise RecordInvalid(
            "genesis must be 64 lowercase hex", "RECORD_SHAPE", pointer="/record/genesis"
        )
    if not HEX64.match(value["author"]):
        raise RecordInvalid(
            "author must be 64 lowercase hex", "RECORD_SHAPE", pointer="/record/author"
        )
    ms = parse_ms(value["authored_at"])
    if ms is None:
        raise RecordInvalid(
            "authored_at must be exactly YYYY-MM-DDTHH:MM:SS.sssZ", "BAD_TIMESTAMP",
            pointer="/record/authored_at",
        )
    if value["previous"] and not HEX64.match(value["previous"]):
        raise RecordInvalid(
            'previous must be "" or a 64-hex revision', "RECORD_SHAPE", pointer="/record/previous"
        )
    body = value["body"]
    if len(body) > MAX_BODY_CHARACTERS:
        raise RecordInvalid(
            f"body is {len(body)} characters; at most {MAX_BODY_CHARACTERS}", "BODY_TOO_LONG",
            pointer="/record/body", limit=MAX_BODY_CHARACTERS, actual=len(body),
        )
    links = value["links"]
    if not isinstance(links, list):
        raise RecordInvalid("links must be a list", "RECORD_SHAPE", pointer="/record/links")
    parsed_links: list[Link] = []
    for i, lk in enumerate(links):
        if (
            not isinstance(lk, dict)
            or set(lk) != {"relation", "target"}
            or not isinstance(lk["relation"], str)
            or not isinstance(lk["target"], str)
        ):
            raise RecordInvalid(
                "each link is exactly {relation, target}", "RECORD_SHAPE",
                pointer=f"/record/links/{i}",
            )
        parsed_links.append(Link(lk["relation"], lk["target"]))
    decoded = decode_body(value["kind"], body)
    data = canonical_parsed(value)
    if value["genesis"] != pin:
        # Not a shape error: a well-formed record signed for another library fails the chain
        # to the pinned genesis, the first check after the record's shape (PROTOCOL §4, §6).
        raise GenesisMismatch(
            "record names another genesis", "GENESIS_MISMATCH", pointer="/record/genesis",
            expected=pin, actual=value["genesis"],
        )
    return Record(
        raw=value, id=sha256_hex(data), canonical=data, author=value["author"],
        authored_at=value["authored_at"], authored_ms=ms, kind=value["kind"], title=value["title"],
        body=body, decoded_body=decoded, links=tuple(parsed_links), previous=value["previous"],
    )


@dataclass(frozen=True)
class Envelope:
    record_value: Any = field(repr=False)
    certificate: Any = field(repr=False)
    proof: str
    raw: Mapping[str, Any] = field(repr=False)


def parse_envelope_bytes(body: bytes) -> Envelope:
    """Body size (before parsing), then envelope shape.  413 / 400."""
    if len(body) > MAX_ENVELOPE_BYTES:
        raise TooLarge(
            f"request body is {len(body)} bytes; at most {MAX_ENVELOPE_BYTES}", "BODY_TOO_LARGE",
            limit=MAX_ENVELOPE_BYTES, actual=len(body),
        )
    value = parse_json(body)
    return parse_envelope(value)


def parse_envelope(value: Any) -> Envelope:
    if not isinstance(value, dict) or set(value) != {"record", "signature"}:
        raise EnvelopeShape(
            'an envelope is a JSON object with exactly "record" and "signature"', "BAD_ENVELOPE",
            expected=["record", "signature"],
        )
    sig = value["signature"]
    if (
        not isinstance(sig, dict)
        or set(sig) != {"certificate", "proof"}
        or not isinstance(sig["proof"], str)
    ):
        raise EnvelopeShape(
            'signature must be exactly {"certificate": DOCUMENT, "proof": HEX}', "BAD_ENVELOPE",
            pointer="/signature",
        )
    return Envelope(value["record"], sig["certificate"], sig["proof"], value)


def envelope_document(env: Envelope) -> bytes:
    """``JCS(envelope)``: the document a contribution's log leaf holds, at most 65,536 bytes."""
    data = canonical_parsed(env.raw)
    if len(data) > MAX_ENVELOPE_BYTES:
        raise TooLarge(
            f"canonical envelope is {len(data)} bytes; at most {MAX_ENVELOPE_BYTES}",
            "ENVELOPE_TOO_LARGE", limit=MAX_ENVELOPE_BYTES, actual=len(data),
        )
    return data


def proof_is_hex(proof: str) -> bool:
    return bool(HEX128.match(proof))


# --- building (CLI, tests, loaders) ----------------------------------------------------------


def encode_body(kind: str, body: Any) -> str:
    """What the CLI does to content bodies: JCS-encode objects, keep reply/vote strings."""
    if kind in OBJECT_KINDS or kind in PERSONAL_KINDS:
        return canonical(body).decode("utf-8")
    if not isinstance(body, str):
        raise RecordInvalid(f"the body of a {kind} is a string", "RECORD_SHAPE", pointer="/body")
    return body


def make_record(
    pin: str, author: str, authored_at: str, content: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "format": CONTRIBUTION_FORMAT,
        "genesis": pin,
        "author": author,
        "authored_at": authored_at,
        "kind": content["kind"],
        "title": content["title"],
        "body": encode_body(content["kind"], content["body"]),
        "links": [dict(lk) for lk in content.get("links", [])],
        "previous": content.get("previous", ""),
    }


def make_envelope(
    record: Mapping[str, Any], certificate: Mapping[str, Any], worker: SigningKey
) -> dict[str, Any]:
    return {
        "record": dict(record),
        "signature": {"certificate": certificate, "proof": worker.sign(canonical(record))},
    }


def envelope_bytes(record: bytes, certificate: bytes, proof: str) -> bytes:
    """``JCS(make_envelope(...))`` spliced from the canonical bytes of the record and the
    certificate, without re-encoding them for every envelope a worker signs: JCS sorts the
    envelope's keys as record < signature, and the signature's as certificate < proof."""
    return b"".join((b'{"record":', record, b',"signature":{"certificate":', certificate,
                     b',"proof":', canonical(proof), b"}}"))


def revision_id(record: Mapping[str, Any]) -> str:
    return sha256_hex(canonical(record))


# --- signed records --------------------------------------------------------------------------


def signed_record_bytes(
    document: bytes, record_length: int, rev_id: str, root: str, admission: bytes
) -> bytes:
    """``JCS(signed record)`` spliced from stored canonical pieces without re-encoding.

    ``document`` is the contribution's ``JCS({"record": R, "signature": S})`` (``leaf.document_of``
    of its log leaf); ``admission`` is ``JCS(admission)``.  JCS sorts the signed record's keys
    as admission < id < record < root < signature, so the result is canonical.
    """
    return b"".join(
        (
            b'{"admission":', admission, b',"id":"', rev_id.encode(), b'","record":',
            document_record(document, record_length), b',"root":"', root.encode(),
            b'","signature":', document_signature(document, record_length), b"}",
        )
    )


def admission_bytes(sequence: int, admitted_at: str, authority_document: bytes) -> bytes:
    """``JCS({"admitted_at", "authority", "sequence"})`` with the stored canonical certificate."""
    return b"".join(
        (
            b'{"admitted_at":"', admitted_at.encode(), b'","authority":', authority_document,
            b',"sequence":', str(sequence).encode(), b"}",
        )
    )
