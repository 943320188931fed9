"""A participant's session: their configuration, their library and what they sign.

The CLI commands are thin on top of this: it reads content, resolves ``$name`` references,
builds and signs records (``alexandria.contribution/3``) with the approved worker key, and checks
what the library sends back against the pinned genesis.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from alexandria.cli.config import Home, LibraryConfig, SetupRequired
from alexandria.cli.terminal import warn_plain_http
from alexandria.client import Client
from alexandria.core.canonical import canonical, find_float, parse_json
from alexandria.core.keys import HEX64, verify
from alexandria.core.records import (
    PERSONAL_KINDS,
    PUBLIC_KINDS,
    make_envelope,
    make_record,
    parse_record,
)
from alexandria.core.timestamps import now
from alexandria.core.trust import (
    AuthorityCertificate,
    Genesis,
    WorkerCertificate,
    parse_worker_certificate,
)
from alexandria.errors import AlexandriaError, BadRequest, Forbidden
from alexandria.files import check_name
from alexandria.service.bootstrap import resolve_refs

CONTENT_FIELDS = ("kind", "title", "body", "links", "previous")
_ALL_KINDS = (*PUBLIC_KINDS, *PERSONAL_KINDS)


@dataclass(frozen=True)
class Signed:
    """An envelope ready to send: its revision id, record and exact bytes."""

    id: str
    record: dict[str, Any]
    envelope: bytes = field(repr=False)


def read_input(source: str) -> bytes:
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise BadRequest(f"cannot read {source}: {exc.strerror}", "CANNOT_READ",
                         path=source) from exc


def parse_document(data: bytes, source: str) -> Any:
    try:
        value = parse_json(data)
    except AlexandriaError as exc:
        raise BadRequest(f"{source}: {exc.message}", exc.code, path=source) from exc
    where = find_float(value)
    if where is not None:
        raise BadRequest(f"{source}: floats are not allowed in signed data (at {where or '/'})",
                         "FLOAT_NOT_ALLOWED", path=source, pointer=where)
    return value


def parse_content(data: bytes, source: str) -> dict[str, Any]:
    """Content as the write contract's ``content_schema`` describes it; ``links`` and
    ``previous`` may be left out (``[]`` and ``""``).  Unknown fields are refused here rather
    than silently dropped from what gets signed."""
    value = parse_document(data, source)
    if not isinstance(value, dict):
        raise BadRequest(f"{source}: content is a JSON object", "CONTENT_SHAPE", path=source)
    unknown = sorted(set(value) - set(CONTENT_FIELDS))
    missing = [k for k in ("kind", "title", "body") if k not in value]
    if unknown or missing:
        raise BadRequest(
            f"{source}: content has the fields {list(CONTENT_FIELDS)}"
            + (f"; unknown {unknown}" if unknown else "")
            + (f"; missing {missing}" if missing else ""),
            "CONTENT_SHAPE", path=source, unknown=unknown, missing=missing,
        )
    return {"links": [], "previous": "", **value}


def parse_refs(pairs: Sequence[str]) -> dict[str, str]:
    refs: dict[str, str] = {}
    for pair in pairs:
        name, sep, rev = pair.partition("=")
        if not sep or not HEX64.match(rev):
            raise BadRequest(f"--ref {pair!r}: expected NAME=REVISION (64 hex)", "BAD_REF")
        refs[check_name(name.removeprefix("$"))] = rev
    return refs


class Session:
    """One participant (a config home) talking to their library."""

    def __init__(self, home: Home, names_file: str | None = None,
                 library: LibraryConfig | None = None) -> None:
        self.home = home
        self.names_path = Path(names_file).absolute() if names_file else None
        self._library = library
        self._client: Client | None = None
        self._genesis: Genesis | None = None

    @property
    def library(self) -> LibraryConfig:
        if self._library is None:
            self._library = self.home.library()
        return self._library

    @property
    def client(self) -> Client:
        if self._client is None:
            warn_plain_http(self.library.url)
            self._client = Client(self.library.url)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # --- genesis and certificate ---------------------------------------------------------------

    def genesis(self) -> Genesis:
        """The pinned genesis: from the home, else fetched once and checked against the pin."""
        if self._genesis is None:
            doc = self.home.genesis_document()
            if doc is None:
                self._genesis = fetch_genesis(self.client, self.library.pin)
                self.home.save_genesis(dict(self._genesis.document))
            else:
                self._genesis = Genesis.from_document(doc, pin=self.library.pin)
        return self._genesis

    def certificate(self) -> WorkerCertificate:
        cert = parse_worker_certificate(self.home.certificate(), self.genesis())
        if cert.worker != self.home.worker_key().public_hex:
            raise SetupRequired(
                "the imported certificate is for another worker key", "CERTIFICATE_KEY_MISMATCH",
                certificate_worker=cert.worker,
            )
        return cert

    # --- names ---------------------------------------------------------------------------------

    def names(self, refs: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self.home.names(self.names_path), **(refs or {})}

    def resolve(self, content: dict[str, Any], refs: Mapping[str, str]) -> dict[str, Any]:
        try:
            resolved: dict[str, Any] = resolve_refs(content, self.names(refs))
        except KeyError as exc:
            name = str(exc.args[0]).removeprefix("unknown reference ")
            raise BadRequest(
                f"unknown reference {name}: publish it with --name {name[1:]}, or pass"
                f" --ref {name[1:]}=REVISION", "UNKNOWN_REFERENCE", reference=name,
            ) from exc
        return resolved

    def revision(self, text: str) -> str:
        """A revision argument: 64 hex, or a name from the names file (``claim``, ``$claim``)."""
        if HEX64.match(text):
            return text
        names = self.names()
        name = text.removeprefix("$")
        if name in names:
            return names[name]
        raise BadRequest(
            f"{text!r} is neither a revision (64 lowercase hex) nor a name in"
            f" {self.names_path or self.home.names_path}", "BAD_REVISION", value=text[:100],
        )

    # --- signing -------------------------------------------------------------------------------

    def sign(self, content: Mapping[str, Any]) -> Signed:
        """Fill ``format``, ``genesis``, ``author``, ``authored_at``, JSON-encode object bodies,
        sign with the worker key; the envelope bytes are ``JCS(envelope)``."""
        key = self.home.worker_key()
        cert_doc = self.home.certificate()
        cert = self.certificate()
        record = make_record(self.library.pin, cert.actor, now(), content)
        envelope = make_envelope(record, cert_doc, key)
        data = canonical(envelope)
        return Signed(parse_record(record, self.library.pin, kinds=_ALL_KINDS).id, record, data)


def fetch_genesis(client: Client, pin: str | None) -> Genesis:
    """The library's genesis, checked against ``pin`` (when given) and its root signatures."""
    answer = client.genesis()
    return Genesis.from_document(answer.get("document"), pin=pin)


def check_signed_record(signed: Mapping[str, Any], genesis: Genesis) -> None:
    """What a reader holding only the pinned genesis can check of one signed record: its id is
    the hash of its record, the worker certificate chains to an authority certificate signed by
    the genesis roots, and the proof is the worker's signature of the record."""
    record = parse_record(signed.get("record"), genesis.pin, kinds=_ALL_KINDS)
    if signed.get("id") != record.id:
        raise Forbidden("the record does not hash to its id", "ID_MISMATCH",
                        id=signed.get("id"), actual=record.id)
    signature = signed.get("signature")
    if not isinstance(signature, dict):
        raise Forbidden("the signed record has no signature", "PROOF_INVALID")
    cert = parse_worker_certificate(signature.get("certificate"), genesis)
    if not verify(cert.worker, str(signature.get("proof")), record.canonical):
        raise Forbidden("proof is not the worker key's signature over JCS(record)",
                        "PROOF_INVALID", worker=cert.worker)
    if cert.actor != record.author:
        raise Forbidden("the record's author is not the certified actor", "AUTHOR_MISMATCH")
    admission = signed.get("admission")
    if isinstance(admission, dict):
        authority = AuthorityCertificate.from_document(admission.get("authority"), genesis)
        if authority.key != cert.authority or "native-application" not in authority.roles:
            raise Forbidden("the admission's authority did not issue the worker certificate",
                            "AUTHORITY_MISMATCH", authority=authority.key)


def body_of(record: Mapping[str, Any]) -> Any:
    """The body as it was written: the decoded object for object kinds, else the string."""
    body = record.get("body", "")
    if isinstance(body, str) and body.startswith("{"):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
    return body
