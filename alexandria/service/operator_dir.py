"""The operator's directory and the documents an operator signs (PROTOCOL §2).

One directory holds one library's operator material.  Its file names are those of the embedded
default that ``alexandria serve`` creates in ``./alexandria-data/``, so the operator commands work
on that directory as they are::

    genesis.json                 the genesis document; genesis.pin holds its pin
    root*.key                    root keys (``genesis init`` writes root-1.key … root-N.key)
    authority.key, log.key       authority keys; NAME-certificate.json beside each key NAME.key
    actors.json                  enrolled participants: {name: actor id}
    workers/WORKER.json          every worker certificate issued, by worker key

Keys are written with mode 0600 and never overwritten.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alexandria.core.keys import HEX64, SigningKey
from alexandria.core.timestamps import format_ms, now, now_ms
from alexandria.core.trust import (
    ROLES,
    SCOPES,
    Genesis,
    make_authority_certificate,
    make_genesis,
    make_revocation,
    make_worker_certificate,
)
from alexandria.errors import Malformed, Refused
from alexandria.files import atomic_write, check_name, private_dir, read_json, write_json

DAY_MS = 86_400_000
SKEW_MS = 5 * 60 * 1000  # certificates start a little in the past: clocks disagree


class OperatorError(Refused):
    default_code = "OPERATOR"


@dataclass(frozen=True)
class OperatorDir:
    root: Path

    @property
    def genesis_path(self) -> Path:
        return self.root / "genesis.json"

    @property
    def pin_path(self) -> Path:
        return self.root / "genesis.pin"

    @property
    def actors_path(self) -> Path:
        return self.root / "actors.json"

    @property
    def workers_dir(self) -> Path:
        return self.root / "workers"

    def certificate_path(self, key_path: Path) -> Path:
        return key_path.with_name(f"{key_path.stem}-certificate.json")

    def genesis(self) -> Genesis:
        if not self.genesis_path.exists():
            raise OperatorError(
                f"no genesis in {self.root}: run `alexandria genesis init --dir {self.root}`",
                "NO_GENESIS", dir=str(self.root),
            )
        return Genesis.from_document(read_json(self.genesis_path))

    def root_keys(self, genesis: Genesis, paths: list[str] | None = None) -> list[SigningKey]:
        """Root keys of this genesis, enough of them for its threshold, each once (a document
        names a key at most once: 403 ``DUPLICATE_SIGNATURE``), whatever files name them."""
        files = [Path(p) for p in paths] if paths else sorted(self.root.glob("root*.key"))
        distinct = {k.public_hex: k for k in (SigningKey.load(f) for f in files)}
        keys = [k for hex_key, k in distinct.items() if hex_key in genesis.root_keys]
        if len(keys) < genesis.threshold:
            raise OperatorError(
                f"this needs {genesis.threshold} root keys of the genesis; found {len(keys)}"
                f" (pass --root-key FILE, repeatable)", "ROOT_KEYS_MISSING",
                threshold=genesis.threshold, found=len(keys),
            )
        return keys

    def actors(self) -> dict[str, str]:
        value: dict[str, str] = read_json(self.actors_path) if self.actors_path.exists() else {}
        return value

    def authority_keys(self) -> dict[str, Path]:
        """Authority key ids certified by this directory's certificates."""
        out: dict[str, Path] = {}
        for path in self.root.glob("*-certificate.json"):
            payload = read_json(path).get("certificate", {})
            if isinstance(payload, dict) and isinstance(payload.get("key"), str):
                out[payload["key"]] = path
        return out


def load_key(path: Path, what: str) -> SigningKey:
    if not path.exists():
        raise OperatorError(f"no {what} key at {path}", "NO_KEY", path=str(path))
    return SigningKey.load(path)


def window(days: int) -> tuple[str, str]:
    if not 1 <= days <= 3660:
        raise Malformed("--days is 1..3660", "BAD_PARAMETER", minimum=1, maximum=3660)
    start = now_ms() - SKEW_MS
    return format_ms(start), format_ms(start + SKEW_MS + days * DAY_MS)


def init_genesis(op: OperatorDir, library: str, origin: str, roots: int, threshold: int
                 ) -> Genesis:
    if op.genesis_path.exists():
        raise OperatorError(f"{op.genesis_path} exists: a library has one genesis",
                            "GENESIS_EXISTS", path=str(op.genesis_path))
    if not 1 <= threshold <= roots <= 16:
        raise Malformed("need 1 <= threshold <= roots <= 16", "BAD_PARAMETER")
    private_dir(op.root)
    keys = [SigningKey.generate() for _ in range(roots)]
    document = make_genesis(library, origin, now(), keys, threshold)
    genesis = Genesis.from_document(document)  # refuses a bad library name or origin
    for i, key in enumerate(keys, 1):
        key.save(op.root / f"root-{i}.key")
    write_json(op.genesis_path, document)
    atomic_write(op.pin_path, (genesis.pin + "\n").encode())
    return genesis


def default_key_path(op: OperatorDir, roles: list[str]) -> Path:
    return op.root / ("log.key" if roles == ["log"] else "authority.key")


def issue_authority(op: OperatorDir, roles: list[str], key_path: Path, days: int,
                    root_key_files: list[str] | None = None) -> tuple[dict[str, Any], bool]:
    """An authority certificate for the key at ``key_path`` (generated when absent), signed by
    the root keys; written beside the key.  True when the key was just created."""
    bad = sorted(set(roles) - set(ROLES))
    if not roles or bad:
        raise Malformed(f"roles are {', '.join(ROLES)}", "BAD_ROLE", allowed=list(ROLES))
    genesis = op.genesis()
    roots = op.root_keys(genesis, root_key_files)
    created = not key_path.exists()
    if created:
        SigningKey.generate().save(key_path)
    key = SigningKey.load(key_path)
    not_before, not_after = window(days)
    doc = make_authority_certificate(genesis, key.public_hex, sorted(set(roles)), not_before,
                                     not_after, roots)
    write_json(op.certificate_path(key_path), doc)
    return doc, created


def enroll(op: OperatorDir, name: str) -> str:
    check_name(name)
    actors = op.actors()
    if name in actors:
        raise OperatorError(f"{name} is already enrolled as {actors[name]}", "ALREADY_ENROLLED",
                            actor=actors[name])
    actor = secrets.token_hex(32)
    write_json(op.actors_path, {**actors, name: actor})
    return actor


def parse_scopes(text: list[str]) -> list[str]:
    """``publish,comment`` or ``library.publish`` … or ``all``."""
    scopes: set[str] = set()
    for part in ",".join(text).split(","):
        part = part.strip()
        if not part:
            continue
        if part == "all":
            scopes.update(SCOPES)
            continue
        full = part if part.startswith("library.") else f"library.{part}"
        if full not in SCOPES:
            raise Malformed(f"unknown scope {part!r}", "BAD_SCOPE", allowed=list(SCOPES))
        scopes.add(full)
    if not scopes:
        raise Malformed("--scopes names at least one scope", "BAD_SCOPE", allowed=list(SCOPES))
    return sorted(scopes)


def approve(op: OperatorDir, actor: str, worker: str, scopes: list[str], days: int,
            authority_key: Path) -> dict[str, Any]:
    """A worker certificate: the native application's approval of one participant key."""
    actor_id = actor if HEX64.match(actor) else op.actors().get(actor)
    if actor_id is None:
        raise OperatorError(f"{actor!r} is neither an actor id nor an enrolled name",
                            "UNKNOWN_ACTOR", enrolled=sorted(op.actors()))
    if not HEX64.match(worker):
        raise Malformed("--worker is the participant's 64-hex public key", "BAD_KEY")
    genesis = op.genesis()
    key = load_key(authority_key, "authority")
    not_before, not_after = window(days)
    doc = make_worker_certificate(genesis, actor_id, worker, scopes, key, not_before, not_after)
    write_json(op.workers_dir / f"{worker}.json", doc)
    return doc


def revocation(op: OperatorDir, key: str, reason: str, by: str | None,
               authority_key: Path, root_key_files: list[str] | None = None) -> dict[str, Any]:
    """Root keys revoke an authority key; the issuing authority revokes a worker key."""
    if not HEX64.match(key):
        raise Malformed("the key to revoke is 64 hex", "BAD_KEY")
    genesis = op.genesis()
    if by is None:
        if (op.workers_dir / f"{key}.json").exists():
            by = "authority"
        elif key in op.authority_keys():
            by = "root"
        else:
            raise OperatorError(
                f"{key} is neither a worker nor an authority key issued from {op.root}:"
                " say --by root (authority key) or --by authority (worker key)", "UNKNOWN_KEY",
            )
    signers = (op.root_keys(genesis, root_key_files) if by == "root"
               else [load_key(authority_key, "authority")])
    return make_revocation(genesis, key, reason, signers)
