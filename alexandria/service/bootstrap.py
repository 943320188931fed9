"""Creating a library from nothing: keys, genesis, authority certificates and participants.

Used by ``alexandria serve`` (embedded default), ``alexandria demo``, the test suite and the
benchmarks.  With a ``seed`` every key is derived from it, so the same seed and timestamps give
the same bytes (the signed test vectors rely on that).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

from alexandria.core.keys import SigningKey
from alexandria.core.records import make_envelope, make_record
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.core.trust import (
    Genesis,
    make_authority_certificate,
    make_genesis,
    make_worker_certificate,
)

ALL_SCOPES = ["library.comment", "library.curate", "library.publish", "library.vote"]
YEAR_MS = 366 * 24 * 3600 * 1000


def derive_key(seed: bytes | None, label: str) -> SigningKey:
    if seed is None:
        return SigningKey.generate()
    return SigningKey(hashlib.sha256(seed + b"/" + label.encode()).digest())


def derive_actor(seed: bytes | None, label: str) -> str:
    if seed is None:
        return os.urandom(32).hex()
    return hashlib.sha256(seed + b"/actor/" + label.encode()).hexdigest()


@dataclass
class Participant:
    name: str
    actor: str
    worker: SigningKey
    certificate: dict[str, Any]

    def envelope(
        self, genesis: Genesis, content: dict[str, Any], authored_at: str
    ) -> dict[str, Any]:
        record = make_record(genesis.pin, self.actor, authored_at, content)
        return make_envelope(record, self.certificate, self.worker)


@dataclass
class Founding:
    """Everything an operator holds right after creating a library."""

    genesis_document: dict[str, Any]
    genesis: Genesis
    roots: list[SigningKey]
    authority: SigningKey
    authority_certificate: dict[str, Any]
    log_key: SigningKey
    log_certificate: dict[str, Any]
    seed: bytes | None = None
    not_before: str = ""
    not_after: str = ""
    participants: dict[str, Participant] = field(default_factory=dict)

    def enroll(
        self, name: str, scopes: list[str] | None = None, not_before: str | None = None,
        not_after: str | None = None,
    ) -> Participant:
        worker = derive_key(self.seed, f"worker/{name}")
        actor = derive_actor(self.seed, name)
        cert = make_worker_certificate(
            self.genesis, actor, worker.public_hex, scopes or ALL_SCOPES, self.authority,
            not_before or self.not_before, not_after or self.not_after,
        )
        p = Participant(name, actor, worker, cert)
        self.participants[name] = p
        return p

    def authority_documents(self) -> list[dict[str, Any]]:
        return [self.authority_certificate, self.log_certificate]


def found_library(
    library: str = "alexandria-dev",
    origin: str = "localhost/alexandria/log",
    created_at: str = "2026-01-01T00:00:00.000Z",
    seed: bytes | None = None,
    roots: int = 1,
    threshold: int = 1,
    validity_ms: int = 10 * YEAR_MS,
) -> Founding:
    root_keys = [derive_key(seed, f"root/{i}") for i in range(roots)]
    doc = make_genesis(library, origin, created_at, root_keys, threshold)
    genesis = Genesis.from_document(doc)
    start = parse_ms(created_at)
    assert start is not None
    not_before, not_after = created_at, format_ms(start + validity_ms)
    authority = derive_key(seed, "authority")
    log_key = derive_key(seed, "log")
    signers = root_keys[:threshold]
    auth_cert = make_authority_certificate(
        genesis, authority.public_hex, ["native-application"], not_before, not_after, signers
    )
    log_cert = make_authority_certificate(
        genesis, log_key.public_hex, ["log"], not_before, not_after, signers
    )
    return Founding(
        doc, genesis, root_keys, authority, auth_cert, log_key, log_cert, seed, not_before,
        not_after,
    )


_REF = re.compile(r"\$([A-Za-z0-9_][A-Za-z0-9_.-]{0,63})\Z")


def resolve_refs(value: Any, names: dict[str, str]) -> Any:
    """Replace strings that are exactly ``$name`` with the ids published under those names.

    Any other string is kept, so prose such as ``"$5 is too much"`` needs no escaping; a string
    that would read as a reference but is meant literally is written with ``$$``
    (``"$$claim"`` → ``"$claim"``)."""
    if isinstance(value, str):
        if value.startswith("$$"):
            return value[1:]
        match = _REF.match(value)
        if match is None:
            return value
        key = match.group(1)
        if key not in names:
            raise KeyError(f"unknown reference ${key}")
        return names[key]
    if isinstance(value, dict):
        return {k: resolve_refs(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, names) for v in value]
    return value
