"""Admission: functions of the write connection and the ``Ledger`` (the writer's memory and
caches), run by the group-commit writer (``store/writer.py``) inside its write transaction.

``admit`` asks the rules (``admission.decide``) through ``WriteView``, the rules'
``StateView`` over the write transaction, then appends the leaf and its Merkle nodes
(``append_leaf``) and writes every projection (``store_contribution``); ``admit_authority``
does the same for authority documents, and ``replay_one`` for an entry of another copy of the
log at its recorded sequence and admission time.  Each raises its refusals (typed errors other
than ``Failed``) before it writes anything: the writer runs them checks first.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from alexandria.core import merkle
from alexandria.core.leaf import document_of, leaf_bytes, record_sql
from alexandria.core.records import admission_bytes, signed_record_bytes
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.core.trust import AuthorityCertificate, Genesis, document_name
from alexandria.errors import Failed, Malformed
from alexandria.rules.admission import Candidate, decide
from alexandria.rules.authority import (
    AuthorityDocument,
    decide_authority_document,
    prepare_authority_document,
)
from alexandria.rules.state import FEED_RELATIONS
from alexandria.rules.view import ObjectFacts, Retry, RevisionFacts, Verdict, object_after
from alexandria.store import feed, schema, search_index
from alexandria.store.interface import Admitted, AuthorityAdmitted, DryRun, Replayed
from alexandria.store.signed_records import SignedRecords
from alexandria.store.writer_memory import WriterMemory


@dataclass
class Ledger:
    """What admission needs beside the write connection: the genesis, the writer's memory
    (``store/writer_memory.py``), the signed-record assembly (for a retry's answer and the
    authority a new record splices in), the authority certificates already parsed, by
    sequence, and the server clock (ms)."""

    genesis: Genesis
    memory: WriterMemory
    records: SignedRecords
    clock: Callable[[], int]
    certificates: dict[int, AuthorityCertificate] = field(default_factory=dict)


class WriteView:
    """``rules.view.StateView`` over the writer's connection, inside its transaction."""

    def __init__(self, conn: sqlite3.Connection, ledger: Ledger) -> None:
        self.conn = conn
        self.cache = ledger.certificates
        self.genesis = ledger.genesis
        self.memory = ledger.memory

    def admitted(self, rev: str) -> int | None:
        if rev in self.memory.absent:  # known not admitted when this transaction began
            return None
        row = self.conn.execute(f"SELECT sequence FROM revisions WHERE {schema.revision_id('?')}",
                                (rev, rev)).fetchone()
        return None if row is None else int(row[0])

    def document_admitted(self, kind: str, key: str, document: bytes) -> int | None:
        # a leaf commits to its admission time, so its hash cannot find a re-posted document:
        # the documents about ``key`` are few, and each leaf's document is compared
        table = "authorities" if kind == "certificate" else "revocations"
        for sequence, leaf in self.conn.execute(
            f"SELECT t.sequence, l.leaf FROM {table} t JOIN log l ON l.sequence = t.sequence"
            " WHERE t.key = ?", (key,),
        ):
            if document_of(bytes(leaf)) == document:
                return int(sequence)
        return None

    def revision(self, rev: str) -> RevisionFacts | None:
        found: RevisionFacts | None = self.memory.cached(
            self.memory.revisions, rev, lambda: self._revision(rev)
        )
        return found

    def _revision(self, rev: str) -> RevisionFacts | None:
        row = self.conn.execute(
            "SELECT sequence, root, kind, author, authored_at, record_length FROM revisions"
            f" WHERE {schema.revision_id('?')}",
            (rev, rev),
        ).fetchone()
        if row is None:
            return None
        sequence, length = row[0], row[5]
        ms = parse_ms(row[4])
        assert ms is not None
        self.memory.feed.seqs[rev] = int(sequence)  # the links to it store its sequence

        def record() -> dict[str, Any]:
            data = self.conn.execute(
                f"SELECT {record_sql()} FROM log WHERE sequence = ?", (length, sequence)
            ).fetchone()[0]
            value: dict[str, Any] = orjson.loads(data)
            return value

        return RevisionFacts(rev, row[1], row[2], row[3], ms, record)

    def object(self, root: str) -> ObjectFacts | None:
        found: ObjectFacts | None = self.memory.cached(
            self.memory.objects, root, lambda: self._object(root)
        )
        return found

    def _object(self, root: str) -> ObjectFacts | None:
        row = self.conn.execute(
            "SELECT root, kind, author, head, depth, feed_links FROM objects"
            f" WHERE {schema.object_row('?')}",
            (root, root),
        ).fetchone()
        if row is None:
            return None
        return ObjectFacts(
            row[0], row[1], row[2], row[3], row[4],
            tuple((a, b) for a, b in orjson.loads(row[5])),
        )

    def vote_of(self, author: str, target_root: str) -> ObjectFacts | None:
        row = self.conn.execute(
            "SELECT vote_root FROM votes WHERE author = ? AND target = ?", (author, target_root)
        ).fetchone()
        return None if row is None else self.object(row[0])

    def authorities(self, key: str) -> Sequence[tuple[int, AuthorityCertificate]]:
        found: list[tuple[int, AuthorityCertificate]] = self.memory.cached(
            self.memory.authorities, key, lambda: self._authorities(key)
        )
        return found

    def _authorities(self, key: str) -> list[tuple[int, AuthorityCertificate]]:
        out = []
        for seq, doc in self.conn.execute(
            "SELECT sequence, document FROM authorities WHERE key = ? ORDER BY sequence", (key,)
        ):
            cert = self.cache.get(seq)
            if cert is None:
                cert = AuthorityCertificate.from_document(orjson.loads(doc), self.genesis)
                self.cache[seq] = cert
            out.append((seq, cert))
        return out

    def revoked(self, key: str, issuer: str | None) -> bool:
        by = issuer or "root"
        found: bool = self.memory.cached(
            self.memory.revoked, (key, by), lambda: self.conn.execute(
                "SELECT 1 FROM revocations WHERE key = ? AND (issuer = 'root' OR issuer = ?)",
                (key, by),
            ).fetchone() is not None,
        )
        return found




def state_view(conn: sqlite3.Connection, ledger: Ledger) -> WriteView:
    """The rules' ``StateView`` over ``conn``, inside a write transaction of this storage."""
    return WriteView(conn, ledger)

def admit(conn: sqlite3.Connection, ledger: Ledger, cand: Candidate,
          dry_run: bool = False) -> Admitted | DryRun:
    view = state_view(conn, ledger)
    now = admission_clock(conn, ledger)
    verdict = decide(view, cand, now)
    if isinstance(verdict, Retry):
        if dry_run:
            return DryRun(verdict.id, verdict.root, True)
        signed = ledger.records.signed(conn, verdict.sequence)
        assert signed is not None
        return Admitted(False, verdict.id, verdict.root, verdict.sequence, signed)
    if dry_run:
        return DryRun(verdict.id, verdict.root, False)
    sequence, admitted_at = append_leaf(conn, ledger.memory,
        "contribution", cand.document, now, record_pieces(cand, verdict))
    store_contribution(conn, ledger.memory, cand, verdict, sequence)
    authority = ledger.records.authority_document(conn, verdict.authority_sequence)
    admission = admission_bytes(sequence, admitted_at, authority)
    signed = signed_record_bytes(
        cand.document, cand.record_length, verdict.id, verdict.root, admission
    )
    return Admitted(True, verdict.id, verdict.root, sequence, signed, admission)

def admission_clock(conn: sqlite3.Connection, ledger: Ledger) -> int:
    """The admission time: the server clock, but never before the last admission, so that
    ``admitted_at`` never decreases along the log.  The rules are checked at exactly the
    time that is recorded, so an offline replay at the recorded times reaches the same
    verdicts."""
    return max(ledger.clock(), ledger.memory.tail(conn)[1])

def append_leaf(
    conn: sqlite3.Connection, memory: WriterMemory, kind: str, document: bytes, now: int,
    record: tuple[str, str, int, int] | None = None,
) -> tuple[int, str]:
    """Append the leaf of ``document`` (its canonical bytes) admitted at ``now`` (from
    ``_admission_clock``): the leaf commits to the admission time (PROTOCOL §7).
    ``record``: a contribution's revision id, root, record length and authority sequence,
    stored beside its leaf (``schema.SIGNED_COLUMNS``)."""
    sequence = memory.tail(conn)[0] + 1
    admitted_at = format_ms(now)
    leaf = leaf_bytes(admitted_at, document)
    leaf_hash = merkle.leaf_hash(leaf)
    conn.execute(
        "INSERT INTO log(sequence, type, leaf, leaf_hash, admitted_at, id, root,"
        " record_length, authority_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (sequence, kind, leaf, leaf_hash, admitted_at, *(record or (None,) * 4)),
    )
    nodes = merkle.append_nodes(sequence - 1, leaf_hash, memory.node_getter(conn))
    conn.executemany(
        "INSERT INTO merkle_nodes(position, hash) VALUES (?, ?)",
        [(merkle.position(level, index), h) for level, index, h in nodes],
    )
    memory.appended(sequence, now, nodes)
    return sequence, admitted_at

def store_contribution(
    conn: sqlite3.Connection, memory: WriterMemory, cand: Candidate, v: Verdict, sequence: int
) -> None:
    rec = cand.record
    cache = memory.feed
    placed: feed.Placement | None = None
    if v.previous:
        # an object's parentage never changes: its near ancestors and tree neither
        created = cache.seq_of(conn, v.root)
        near = cache.near_of(conn, created)
        tree = cache.node(conn, created).tree if v.kind in feed.CONVERSATION else 0
    else:
        placed = feed.place(conn, cache, v.kind, sequence, (
            (lk.relation, target_root)
            for lk, target_root in zip(rec.links, v.link_roots, strict=True)
            if lk.relation in FEED_RELATIONS
        ))
        near = placed.near
        tree = placed.node.tree if placed.node is not None else 0
    conn.execute(
        "INSERT INTO revisions(sequence, id, root, kind, author, authored_at, title,"
        " record_length, authority_seq, tree) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (sequence, v.id, v.root, v.kind, v.author, rec.authored_at, rec.title,
         cand.record_length, v.authority_sequence, tree),
    )
    memory.absent.discard(v.id)
    cache.seqs[v.id] = sequence  # links to it store its sequence
    if placed is None:
        conn.execute(
            "UPDATE objects SET head = ?, head_sequence = ?, revisions = revisions + 1"
            f" WHERE {schema.object_row('?')}",
            (v.id, sequence, v.root, v.root),
        )
        cached = memory.objects.get(v.root)
        if cached is not None:
            memory.objects[v.root] = object_after(v, cached)
    else:
        parent = next((t for r, t in v.feed_links if r == "contained_in"), "")
        conn.execute(
            "INSERT INTO objects(root, kind, author, head, head_sequence, revisions, depth,"
            " parent, vote_target, feed_links, created_sequence, ancestors, tree, cdepth,"
            " cparent, jump) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (v.root, v.kind, v.author, v.id, sequence, v.depth, parent, v.vote_target,
             orjson.dumps(v.feed_links).decode(), sequence, near.encode(),
             *feed.position(placed.node)),
        )
        if v.vote_target:
            conn.execute(
                "INSERT INTO votes(author, target, vote_root) VALUES (?, ?, ?)",
                (v.author, v.vote_target, v.root),
            )
        cache.remember(v.root, sequence, near, placed.node)
        if placed.mark is not None:
            feed.mark_deep(conn, cache, placed.mark)
    feed.write_rows(conn, near, sequence)
    links = [
        (sequence, i, lk.relation, lk.target, cache.seq_of(conn, lk.target),
         cache.seq_of(conn, target_root))
        for i, (lk, target_root) in enumerate(zip(rec.links, v.link_roots, strict=True))
    ]
    conn.executemany(
        "INSERT INTO links(source_sequence, position, relation, target, target_seq,"
        " target_owner) VALUES (?, ?, ?, ?, ?, ?)", links,
    )
    # the object's tree links with its head (schema ``tree_heads``): a revision carries
    # its object's tree links unchanged (rules.state), so they name the rows to update
    tree_links = [(owner, relation) for _s, _i, relation, _t, _ts, owner in links
                  if relation in FEED_RELATIONS]
    if placed is not None:
        conn.executemany(
            "INSERT OR IGNORE INTO tree_heads(target_owner, relation, created_sequence,"
            " head_sequence) VALUES (?, ?, ?, ?)",
            [(owner, relation, sequence, sequence) for owner, relation in tree_links],
        )
    else:
        conn.executemany(
            "UPDATE tree_heads SET head_sequence = ? WHERE target_owner = ?"
            " AND relation = ? AND created_sequence = ?",
            [(sequence, owner, relation, created) for owner, relation in tree_links],
        )
    search_index.on_admitted(conn, rec, v, sequence, memory.actors, cand.index_text)

def admit_authority(
    conn: sqlite3.Connection, ledger: Ledger, prepared: AuthorityDocument, now: int | None = None
) -> AuthorityAdmitted:
    """The rules' verdict (``authority.decide_authority_document``), then the leaf and the
    row the rules will ask about later.  ``now``: the admission time (a replay passes the
    recorded one)."""
    if now is None:
        now = admission_clock(conn, ledger)
    v = decide_authority_document(state_view(conn, ledger), prepared, ledger.genesis, now)
    if v.retry_of is not None:
        row = conn.execute(
            "SELECT admitted_at FROM log WHERE sequence = ?", (v.retry_of,)
        ).fetchone()
        return AuthorityAdmitted(False, v.retry_of, row[0], orjson.loads(v.data))
    sequence, admitted_at = append_leaf(conn, ledger.memory, v.type, v.data, now)
    if v.certificate is not None:
        cert = v.certificate
        conn.execute(
            "INSERT INTO authorities(sequence, key, roles, document) VALUES (?, ?, ?, ?)",
            (sequence, cert.key, json.dumps(list(cert.roles)), v.data),
        )
        ledger.certificates[sequence] = cert
        ledger.memory.authorities.clear()
    else:
        assert v.revocation is not None
        conn.execute(
            "INSERT INTO revocations(sequence, key, issuer) VALUES (?, ?, ?)",
            (sequence, v.revocation.key, v.revocation.signer),
        )
        ledger.memory.revoked.clear()
    return AuthorityAdmitted(True, sequence, admitted_at, dict(v.document))

def replay_one(conn: sqlite3.Connection, ledger: Ledger, e: Replayed) -> None:
    size, last_ms = ledger.memory.tail(conn)
    if e.sequence != size + 1:
        raise Failed(f"entry {e.sequence} does not follow the log's {size} leaves",
                     "REPLAY_OUT_OF_ORDER", sequence=e.sequence, tree_size=size)
    if e.admitted_ms < last_ms:
        raise Failed("admitted_at is before the previous entry's", "ADMITTED_AT_ORDER")
    if e.candidate is not None:
        cand = e.candidate
        if e.kind != "contribution":
            raise Malformed(f"a contribution recorded as a {e.kind}", "TYPE_MISMATCH")
        verdict = decide(state_view(conn, ledger), cand, e.admitted_ms)
        if isinstance(verdict, Retry):  # the server answers a retry without a new leaf
            raise Malformed("the same contribution was already admitted",
                            "DUPLICATE_ENTRY", first=verdict.sequence)
        sequence, _ = append_leaf(conn, ledger.memory, "contribution", cand.document, e.admitted_ms,
                                        record_pieces(cand, verdict))
        store_contribution(conn, ledger.memory, cand, verdict, sequence)
        return
    name = document_name(e.document)
    if name != e.kind:
        raise Malformed(f"a {name} recorded as a {e.kind}", "TYPE_MISMATCH")
    prepared = prepare_authority_document(e.document, ledger.genesis)
    result = admit_authority(conn, ledger, prepared, e.admitted_ms)
    if not result.created:
        raise Malformed(f"the same document was already admitted at {result.sequence}",
                        "DUPLICATE_ENTRY")


def record_pieces(cand: Candidate, verdict: Verdict) -> tuple[str, str, int, int]:
    """What a contribution's ``log`` row carries beside its leaf (``schema.SIGNED_COLUMNS``)."""
    return verdict.id, verdict.root, cand.record_length, verdict.authority_sequence
