"""A ledger replayed from empty, for the offline verifier (``verify.py``, step 2d).

It is a ``rules.memory.MemoryLedger`` — revisions, objects and their heads, votes, authority
certificates, revocations: exactly the facts the rules ask about — plus the RFC 6962 perfect
nodes and the record bytes in a temporary SQLite file, so memory stays small.  Admission runs
the server's own functions (``admission.decide`` for contributions,
``authority.check_authority_document`` for authority documents); what is stored afterwards
mirrors ``LedgerStorage._store_contribution`` and ``_admit_authority`` for those facts only.
The server's write path also maintains projections the rules never read (feeds, ancestors,
links, search and score indexes) and costs about a millisecond per entry.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from alexandria.core import merkle
from alexandria.core.trust import Genesis
from alexandria.errors import AlexandriaError
from alexandria.rules.admission import Candidate, decide
from alexandria.rules.authority import LOG_ROLE, check_authority_document
from alexandria.rules.memory import MemoryLedger
from alexandria.rules.view import Retry
from alexandria.store.merkle_nodes import node_reader


class Ledger(MemoryLedger):
    """The replayed ledger.  ``tests/audit/test_verify.py`` checks that a replay of a server's log
    ends in the same objects, heads and votes as the server's tables, and
    ``tests/rules/test_differential.py`` that it reaches the server's verdicts."""

    def __init__(self, genesis: Genesis, path: Path) -> None:
        super().__init__()
        self.genesis = genesis
        self.size = 0
        self.last_ms = 0
        self._frontier: dict[tuple[int, int], bytes] = {}
        self._nodes: list[merkle.Node] = []
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.executescript(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
            " CREATE TABLE records(sequence INTEGER PRIMARY KEY, record BLOB NOT NULL);"
            " CREATE TABLE merkle_nodes(position INTEGER PRIMARY KEY, hash BLOB NOT NULL);"
        )

    def close(self) -> None:
        self.db.close()

    def log_keys(self) -> list[str]:
        return self.authority_keys(LOG_ROLE)

    # admission

    def record_bytes(self, seq: int) -> bytes:
        """Records of the current batch from memory, older ones from the temporary file."""
        data = self.records.get(seq)
        if data is None:
            data = bytes(self.db.execute(
                "SELECT record FROM records WHERE sequence = ?", (seq,)).fetchone()[0])
        return data

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
        """``LedgerStorage._admit`` for the entry ``leaf`` admitted at ``now``: the rules
        (``admission.decide``), then the facts the rules will ask about later.  An exact
        retry, which the server answers without a new leaf, is refused here."""
        v = decide(self, cand, now)
        if isinstance(v, Retry):
            raise AlreadyAdmitted(v.sequence)
        self.store_contribution(v, cand.record, self._append(leaf, now))

    def admit_authority(self, document: Any, leaf: bytes, now: int) -> str:
        """``LedgerStorage._admit_authority`` for the entry ``leaf`` (``JCS(document)``)
        admitted at ``now``: the document's type once admitted."""
        v = check_authority_document(self, document, self.genesis, now)
        if v.retry_of is not None:
            raise AlreadyAdmitted(v.retry_of)
        self.store_authority(v, self._append(leaf, now))
        return v.type

    # the tree

    def flush(self) -> None:
        """Write the pending nodes and records (once per batch)."""
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO merkle_nodes(position, hash) VALUES (?, ?)",
                            [(merkle.position(lv, i), h) for lv, i, h in self._nodes])
        self.db.executemany("INSERT INTO records(sequence, record) VALUES (?, ?)",
                            self.records.items())
        self.db.execute("COMMIT")
        self._nodes.clear()
        self.records.clear()

    def nodes(self) -> merkle.GetNode:
        """``get(level, index)`` over the recomputed perfect nodes."""
        self.flush()
        return node_reader(self.db)


class AlreadyAdmitted(AlexandriaError):
    default_code = "DUPLICATE_ENTRY"

    def __init__(self, first: int) -> None:
        where = f" at sequence {first}" if first else ""
        super().__init__(f"the same document was already admitted{where}", first=first)
