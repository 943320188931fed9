"""A participant's session: their configuration, their library and what they sign.

The CLI commands are thin on top of this: it reads content, resolves ``$name`` references,
builds and signs records (``alexandria.contribution/3``) with the approved worker key, and checks
what the library sends back against the pinned genesis.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alexandria.cli.config import Home, LibraryConfig, SetupRequired
from alexandria.cli.terminal import warn_plain_http
from alexandria.client import (
    Client,
    Unreachable,
    check_library_url,
    has_credentials,
    redact_url,
)
from alexandria.core.canonical import canonical, find_float, parse_json, sha256_hex
from alexandria.core.keys import HEX64, SigningKey
from alexandria.core.records import (
    MAX_ENVELOPE_BYTES,
    OBJECT_KINDS,
    PERSONAL_KINDS,
    PUBLIC_KINDS,
    decode_body,
    envelope_bytes,
    make_record,
    parse_record,
)
from alexandria.core.schema import validate_content
from alexandria.core.timestamps import now
from alexandria.core.trust import Genesis, WorkerCertificate, parse_worker_certificate
from alexandria.errors import AlexandriaError, Malformed, Refused
from alexandria.files import check_name
from alexandria.rules import signed as rules_signed
from alexandria.service.bootstrap import resolve_refs

#: A shorter revision argument the library's ``GET /api/lookup`` resolves.
_PREFIX = re.compile(r"[0-9a-f]{8,63}")

if TYPE_CHECKING:
    from alexandria.rules.signed import CheckedRecord

CONTENT_FIELDS = ("kind", "title", "body", "links", "previous")
_ALL_KINDS = (*PUBLIC_KINDS, *PERSONAL_KINDS)


class ContentRefused(Refused):
    """Content the library would refuse, caught before it is signed: nothing is written to
    ``pending/`` or ``rejected/`` and nothing is sent.  Same code and details as the library's
    answer would carry."""

    default_code = "CONTENT_REFUSED"


def _strings(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{where}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}/{i}")


def check_content(content: Mapping[str, Any], kinds: tuple[str, ...] = PUBLIC_KINDS) -> None:
    """What can be known about content before signing it, in words a person understands: the
    kind (with the right case), the body's type for that kind, and no credentials in a URL
    (they would be signed, sent, kept in ``rejected/`` and printed)."""
    kind = content.get("kind")
    if not isinstance(kind, str) or kind not in kinds:
        hint = ""
        if isinstance(kind, str):
            close = [k for k in kinds if k == kind.lower()] or difflib.get_close_matches(
                kind, kinds, n=1, cutoff=0.6)
            hint = f": did you mean {close[0]!r}?" if close else ""
        raise ContentRefused(
            f"unknown kind {str(kind)[:40]!r}{hint} (kinds: {', '.join(kinds)})",
            "UNKNOWN_KIND", pointer="/kind", allowed=list(kinds))
    body = content.get("body")
    if kind in OBJECT_KINDS and not isinstance(body, dict):
        raise ContentRefused(f"the body of a {kind} is a JSON object, e.g. {{\"text\": \"…\"}}",
                             "RECORD_SHAPE", pointer="/body")
    if kind not in OBJECT_KINDS and kind in PUBLIC_KINDS and not isinstance(body, str):
        raise ContentRefused(f"the body of a {kind} is a string", "RECORD_SHAPE",
                             pointer="/body")
    for where, text in _strings(content):
        if has_credentials(text):
            raise ContentRefused(
                f"{where}: {redact_url(text)[:200]} contains a user name or password; remove"
                " it (what you publish is public and signed forever)",
                "CREDENTIALS_IN_URL", pointer=where)


def check_record(record: dict[str, Any], pin: str, kinds: tuple[str, ...]) -> None:
    """The record's shape, body length and (public kinds) the write contract's content
    schema, as the library checks them: a mistake costs no signature and no pending file."""
    try:
        parsed = parse_record(record, pin, kinds=kinds)
        if parsed.kind in PUBLIC_KINDS:
            validate_content(parsed.content)
    except AlexandriaError as exc:
        raise ContentRefused(exc.message, exc.code, **exc.details) from exc


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
        raise Malformed(f"cannot read {source}: {exc.strerror}", "CANNOT_READ",
                        path=source) from exc


def parse_document(data: bytes, source: str) -> Any:
    try:
        value = parse_json(data)
    except AlexandriaError as exc:
        raise Malformed(f"{source}: {exc.message}", exc.code, path=source) from exc
    where = find_float(value)
    if where is not None:
        raise Malformed(f"{source}: floats are not allowed in signed data (at {where or '/'})",
                        "FLOAT_NOT_ALLOWED", path=source, pointer=where)
    return value


def parse_content(data: bytes, source: str) -> dict[str, Any]:
    """Content as the write contract's ``content_schema`` describes it; ``links`` and
    ``previous`` may be left out (``[]`` and ``""``).  Unknown fields are refused here rather
    than silently dropped from what gets signed."""
    value = parse_document(data, source)
    if not isinstance(value, dict):
        raise Malformed(f"{source}: content is a JSON object", "CONTENT_SHAPE", path=source)
    unknown = sorted(set(value) - set(CONTENT_FIELDS))
    missing = [k for k in ("kind", "title", "body") if k not in value]
    if unknown or missing:
        raise Malformed(
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
            raise Malformed(f"--ref {pair!r}: expected NAME=REVISION (64 hex)", "BAD_REF")
        refs[check_name(name.removeprefix("$"))] = rev
    return refs


class Session:
    """One participant (a config home) talking to their library."""

    def __init__(self, home: Home, names_file: str | None = None,
                 library: LibraryConfig | None = None, library_url: str | None = None) -> None:
        """``library_url`` (``--library``, ``$ALEXANDRIA_LIBRARY``) overrides the configured
        library: reading then needs no key and no configuration at all."""
        self.home = home
        self.names_path = Path(names_file).absolute() if names_file else None
        self._library = library
        self._library_url = check_library_url(library_url) if library_url else None
        self._client: Client | None = None
        self._genesis: Genesis | None = None
        self._names: dict[str, str] | None = None
        self._signer: tuple[SigningKey, bytes, WorkerCertificate] | None = None

    @property
    def library(self) -> LibraryConfig:
        if self._library is None:
            known = self.home.library_or_none() if self._library_url else self.home.library()
            if self._library_url and (known is None or known.url != self._library_url):
                self._library = LibraryConfig(self._library_url, "")  # no pin: unpinned reads
            else:
                assert known is not None
                self._library = known
        return self._library

    @property
    def pinned(self) -> bool:
        return bool(self.library.pin)

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
            if not self.pinned:  # --library URL with no pin of it: the library's own genesis
                self._genesis = fetch_genesis(self.client, None)
                return self._genesis
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
        """The names file, read once per session; ``remember`` adds what this session admits."""
        if self._names is None:
            self._names = self.home.names(self.names_path)
        return {**self._names, **(refs or {})}

    def remember(self, name: str, rev: str) -> None:
        self.names()
        assert self._names is not None
        self._names[name] = rev

    def resolve(self, content: dict[str, Any], refs: Mapping[str, str]) -> dict[str, Any]:
        try:
            resolved: dict[str, Any] = resolve_refs(content, self.names(refs))
        except KeyError as exc:
            name = str(exc.args[0]).removeprefix("unknown reference ")
            raise Malformed(
                f"unknown reference {name}: publish it with --name {name[1:]}, or pass"
                f" --ref {name[1:]}=REVISION", "UNKNOWN_REFERENCE", reference=name,
            ) from exc
        return resolved

    def revision(self, text: str) -> str:
        """A revision argument: 64 hex, a unique prefix of one (8 or more hex, resolved by the
        library's ``GET /api/lookup``), or a name from the names file (``claim``, ``$claim``)."""
        if HEX64.match(text):
            return text
        if _PREFIX.fullmatch(text):
            found = self.client.get_json("/api/lookup", id=text, kind="object,revision")
            full = found.get("id") if isinstance(found, dict) else None
            if not isinstance(full, str) or not HEX64.match(full) or not full.startswith(text):
                raise Unreachable(f"the library answered a lookup of {text} with {full!r},"
                                  " which is not an id beginning with it", "BAD_RESPONSE",
                                  url=self.library.url)
            return full
        names = self.names()
        name = text.removeprefix("$")
        if name in names:
            return names[name]
        raise Malformed(
            f"{text!r} is neither a revision (64 lowercase hex, or its first 8 or more) nor a"
            " name in"
            f" {self.names_path or self.home.names_path}", "BAD_REVISION", value=text[:100],
        )

    # --- signing -------------------------------------------------------------------------------

    def sign(self, content: Mapping[str, Any]) -> Signed:
        """Fill ``format``, ``genesis``, ``author``, ``authored_at``, JSON-encode object bodies,
        check everything the library would check of the content alone, then sign with the
        worker key; the envelope bytes are ``JCS(envelope)``."""
        check_content(content, _ALL_KINDS if content.get("kind") in PERSONAL_KINDS
                      else PUBLIC_KINDS)
        if self._library_url and not self.pinned:  # --library of another URL: reads only
            raise SetupRequired(
                f"{self.library.url} is not the library configured in {self.home.root}: a"
                " contribution is signed for one pinned library. Publish without --library"
                " (or $ALEXANDRIA_LIBRARY), or point your configuration at that library with"
                " `alexandria login URL --genesis PIN`", "NOT_PINNED", library=self.library.url)
        if self._signer is None:
            self._signer = (self.home.worker_key(), canonical(self.home.certificate()),
                            self.certificate())
        key, cert_bytes, cert = self._signer
        record = make_record(self.library.pin, cert.actor, now(), content)
        check_record(record, self.library.pin, _ALL_KINDS)
        record_bytes = canonical(record)
        data = envelope_bytes(record_bytes, cert_bytes, key.sign(record_bytes))
        if len(data) > MAX_ENVELOPE_BYTES:
            raise ContentRefused(
                f"the signed envelope is {len(data):,} bytes; the library takes at most"
                f" {MAX_ENVELOPE_BYTES:,}: shorten the body", "PAYLOAD_TOO_LARGE",
                limit=MAX_ENVELOPE_BYTES, actual=len(data))
        return Signed(sha256_hex(record_bytes), record, data)


def fetch_genesis(client: Client, pin: str | None) -> Genesis:
    """The library's genesis, checked against ``pin`` (when given) and its root signatures."""
    answer = client.genesis()
    try:
        return Genesis.from_document(answer.get("document"), pin=pin)
    except AlexandriaError as exc:
        actual = exc.details.get("actual")
        if exc.code != "GENESIS_PIN_MISMATCH" or not isinstance(actual, str):
            raise
        exc.message = (f"{client.base_url} serves genesis {actual}, not the pin you gave"
                       f" ({pin}): this is another library, or the pin is mistyped; compare"
                       " both with the pin the operator published")
        exc.details["library"] = client.base_url
        raise


class RecordNotVerified(Refused):
    """A record the library served does not check against the pinned genesis (exit 6)."""

    default_code = "NOT_VERIFIED"


def check_signed_record(signed: Any, genesis: Genesis) -> CheckedRecord:
    """What a reader holding only the pinned genesis can check of one signed record, with the
    server's own rules and codes (``rules.signed.check_signed_record``): its id is the hash
    of its record, the worker certificate chains to the admission's authority certificate
    signed by the genesis roots, the author is the certified actor, the proof, scope and
    content verify, and both certificates were valid at admission.  A failure keeps the
    server's code and is a verification failure (exit 6)."""
    try:
        return rules_signed.check_signed_record(signed, genesis)
    except AlexandriaError as exc:
        raise RecordNotVerified(f"the library served a record that does not verify:"
                                f" {exc.message}", exc.code, **exc.details) from exc


def body_of(record: Mapping[str, Any]) -> Any:
    """The body as it was written: the decoded object for the kinds whose body is canonical
    JSON (``records.decode_body``), the string itself for replies and votes."""
    kind, body = record.get("kind"), record.get("body", "")
    if not isinstance(kind, str) or not isinstance(body, str):
        return body
    try:
        return decode_body(kind, body)
    except AlexandriaError:
        return body
