"""A ledger replayed from empty, for the offline verifier (``verify.py``, step 2d).

It is a ``rules.StateView`` held in memory — revisions, objects and their heads, votes,
authority certificates, revocations: exactly the facts the rules ask about — plus the RFC 6962
perfect nodes and the record bytes in a temporary SQLite file, so memory stays small.  Admission
runs the server's own functions (``rules.admission.decide`` → ``rules/state.py``,
``core/trust.py``); what is stored afterwards mirrors ``SqliteStorage._store_contribution`` and
``_admit_authority`` for those facts only.  The server's write path also maintains projections
the rules never read (feeds, ancestors, links, search and score indexes) and costs about a
millisecond per entry.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from alexandria.core import merkle
from alexandria.core.leaf import document_of
from alexandria.core.trust import (
    AUTHORITY_FORMAT,
    AuthorityCertificate,
    Genesis,
    document_name,
)
from alexandria.errors import AlexandriaError, BadRequest, Forbidden
from alexandria.reads import log
from alexandria.rules.admission import Candidate, decide
from alexandria.rules.state import ObjectFacts, RevisionFacts, check_revocation
from alexandria.store.merkle_nodes import node_reader


class Ledger:
    """The replayed ledger.  ``tests/test_verify.py`` checks that a replay of a server's log
    ends in the same objects, heads and votes as the server's tables."""

    def __init__(self, genesis: Genesis, path: Path) -> None:
        self.genesis = genesis
        self.size = 0
        self.last_ms = 0
        self._revisions: dict[str, tuple[int, str, str, str, int]] = {}
        self._objects: dict[str, ObjectFacts] = {}
        self._votes: dict[tuple[str, str], str] = {}
        self._authorities: dict[str, list[tuple[int, AuthorityCertificate]]] = {}
        self._revocations: dict[str, set[str]] = {}
        self._authority_documents: set[bytes] = set()  # an exact re-post is no new leaf
        self._frontier: dict[tuple[int, int], bytes] = {}
        self._nodes: list[merkle.Node] = []
        self._records: dict[int, bytes] = {}
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.executescript(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
            " CREATE TABLE records(sequence INTEGER PRIMARY KEY, record BLOB NOT NULL);"
            " CREATE TABLE merkle_nodes(position INTEGER PRIMARY KEY, hash BLOB NOT NULL);"
        )

    def close(self) -> None:
        self.db.close()

    # rules.StateView

    def revision(self, rev: str) -> RevisionFacts | None:
        found = self._revisions.get(rev)
        if found is None:
            return None
        seq, root, kind, author, ms = found
        return RevisionFacts(rev, root, kind, author, ms, lambda: self._record(seq))

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

    def log_keys(self) -> list[str]:
        return [k for k, certs in self._authorities.items()
                if any(log.LOG_ROLE in c.roles for _s, c in certs)]

    # admission

    def _record(self, seq: int) -> dict[str, Any]:
        data = self._records.get(seq)
        if data is None:
            data = self.db.execute(
                "SELECT record FROM records WHERE sequence = ?", (seq,)).fetchone()[0]
        value: dict[str, Any] = orjson.loads(data)
        return value

    def _append(self, leaf: bytes, admitted_ms: int) -> int:
        """The next leaf: its perfect nodes, left siblings served from the frontier."""
        seq = self.size + 1
        for node in merkle.append_nodes(self.size, merkle.leaf_hash(leaf), self._sibling):
            self._nodes.append(node)
            if not node[1] & 1:  # a left child: its right sibling will need it
                self._frontier[(node[0], node[1])] = node[2]
        self.size = seq
        self.last_ms = admitted_ms
        return seq

    def _sibling(self, level: int, idx: int) -> bytes:
        return self._frontier.pop((level, idx))

    def admit_contribution(self, cand: Candidate, leaf: bytes, now: int) -> None:
        """``SqliteStorage._admit``, for a new entry: the rules (``admission.decide``), then
        the facts the rules will ask about later."""
        rec = cand.record
        if rec.id in self._revisions:
            if cand.deferred is not None:
                raise cand.deferred
            raise AlreadyAdmitted(self._revisions[rec.id][0])
        v = decide(self, cand, now)
        seq = self._append(leaf, now)
        self._records[seq] = rec.canonical
        self._revisions[v.id] = (seq, v.root, v.kind, v.author, rec.authored_ms)
        if v.previous:
            self._objects[v.root] = replace(self._objects[v.root], head=v.id)
        else:
            self._objects[v.root] = ObjectFacts(v.root, v.kind, v.author, v.id, v.depth,
                                                v.feed_links)
            if v.vote_target:
                self._votes[(v.author, v.vote_target)] = v.root

    def admit_authority(self, document: Any, leaf: bytes, now: int) -> str:
        """``SqliteStorage._admit_authority``: the document's type once admitted."""
        name = document_name(document)
        if name == "certificate":
            payload = document["certificate"]
            if isinstance(payload, dict) and payload.get("format") != AUTHORITY_FORMAT:
                raise BadRequest(f"only {AUTHORITY_FORMAT} documents are admitted",
                                 "NOT_AN_AUTHORITY_DOCUMENT")
            cert = AuthorityCertificate.from_document(document, self.genesis)
            if document_of(leaf) in self._authority_documents:
                raise AlreadyAdmitted(0)
            if self.revoked(cert.key, None):
                raise Forbidden("that key was revoked by root", "AUTHORITY_REVOKED",
                                key=cert.key)
            seq = self._append(leaf, now)
            self._authorities.setdefault(cert.key, []).append((seq, cert))
        elif name == "revocation":
            rev = check_revocation(self, document, self.genesis, now)
            if document_of(leaf) in self._authority_documents:
                raise AlreadyAdmitted(0)
            self._append(leaf, now)
            self._revocations.setdefault(rev.key, set()).add(rev.signer)
        else:
            raise BadRequest(f"a {name!r} document is not admitted into the log",
                             "BAD_DOCUMENT")
        self._authority_documents.add(document_of(leaf))
        return name

    # the tree

    def flush(self) -> None:
        """Write the pending nodes and records (once per batch)."""
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO merkle_nodes(position, hash) VALUES (?, ?)",
                            [(merkle.position(lv, i), h) for lv, i, h in self._nodes])
        self.db.executemany("INSERT INTO records(sequence, record) VALUES (?, ?)",
                            self._records.items())
        self.db.execute("COMMIT")
        self._nodes.clear()
        self._records.clear()

    def nodes(self) -> merkle.GetNode:
        self.flush()
        return node_reader(self.db)


class AlreadyAdmitted(AlexandriaError):
    default_code = "DUPLICATE_ENTRY"

    def __init__(self, first: int) -> None:
        where = f" at sequence {first}" if first else ""
        super().__init__(f"the same document was already admitted{where}", first=first)
