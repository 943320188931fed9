"""A ledger replayed from empty, for the offline verifier (``verify.py``, step 2d).

It is a ``rules.memory.MemoryLedger`` — revisions, objects and their heads, votes, authority
certificates, revocations: exactly the facts the rules ask about — plus the RFC 6962 perfect
nodes and the record bytes in anonymous temporary files, so memory stays small.  Admission runs
the server's own functions (``admission.decide`` for contributions,
``authority.check_authority_document`` for authority documents); what is stored afterwards
mirrors ``store/admission.store_contribution`` and ``admit_authority`` for those facts only.
The server's write path also maintains projections the rules never read (feeds, ancestors,
links, search and score indexes) and costs about a millisecond per entry.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path
from typing import Any

from alexandria.core import merkle
from alexandria.core.trust import Genesis
from alexandria.errors import Refused
from alexandria.rules.admission import Candidate, decide
from alexandria.rules.authority import LOG_ROLE, check_authority_document
from alexandria.rules.memory import MemoryLedger
from alexandria.rules.view import Retry

_INDEX = struct.Struct("<QI")  # a record's offset and length, at (sequence - 1) * _INDEX.size


class Ledger(MemoryLedger):
    """The replayed ledger.  ``tests/audit/test_verify.py`` checks that a replay of a server's log
    ends in the same objects, heads and votes as the server's tables, and
    ``tests/rules/test_differential.py`` that it reaches the server's verdicts."""

    def __init__(self, genesis: Genesis, directory: Path | None = None) -> None:
        """``directory``: where the scratch files are made (already unlinked: nothing is left
        behind, whatever happens); the system's temporary directory by default."""
        super().__init__()
        self.genesis = genesis
        self.size = 0
        self.last_ms = 0
        self._frontier: dict[tuple[int, int], bytes] = {}
        self._nodes: list[merkle.Node] = []
        # the records, one after another; where each one is, by sequence; each perfect node's
        # hash at its position (``merkle.position``) times 32.  Closed by ``close``.
        self._files = [tempfile.TemporaryFile(dir=directory, buffering=0)  # noqa: SIM115
                       for _ in range(3)]
        self._records_fd, self._index_fd, self._hashes_fd = (f.fileno() for f in self._files)
        self._records_end = 0

    def close(self) -> None:
        for f in self._files:
            f.close()

    def log_keys(self) -> list[str]:
        return self.authority_keys(LOG_ROLE)

    # admission

    def record_bytes(self, seq: int) -> bytes:
        """Records of the current batch from memory, older ones from the scratch file."""
        data = self.records.get(seq)
        if data is None:
            where = os.pread(self._index_fd, _INDEX.size, (seq - 1) * _INDEX.size)
            offset, length = _INDEX.unpack(where) if len(where) == _INDEX.size else (0, 0)
            if not length:
                raise KeyError(seq)
            data = os.pread(self._records_fd, length, offset)
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
        """``store/admission.admit`` for the entry ``leaf`` admitted at ``now``: the rules
        (``admission.decide``), then the facts the rules will ask about later.  An exact
        retry, which the server answers without a new leaf, is refused here."""
        v = decide(self, cand, now)
        if isinstance(v, Retry):
            raise AlreadyAdmitted(v.sequence)
        self.store_contribution(v, cand.record, self._append(leaf, now))

    def admit_authority(self, document: Any, leaf: bytes, now: int) -> str:
        """``store/admission.admit_authority`` for the entry ``leaf`` (``JCS(document)``)
        admitted at ``now``: the document's type once admitted."""
        v = check_authority_document(self, document, self.genesis, now)
        if v.retry_of is not None:
            raise AlreadyAdmitted(v.retry_of)
        self.store_authority(v, self._append(leaf, now))
        return v.type

    # the tree

    def flush(self) -> None:
        """Write the pending nodes and records (once per batch)."""
        if self.records:
            seqs = sorted(self.records)
            first = seqs[0]
            index = bytearray(_INDEX.size * (seqs[-1] - first + 1))  # no record: zeros
            chunks = []
            end = self._records_end
            for seq in seqs:
                data = self.records[seq]
                _INDEX.pack_into(index, (seq - first) * _INDEX.size, end, len(data))
                end += len(data)
                chunks.append(data)
            _write(self._records_fd, b"".join(chunks), self._records_end)
            _write(self._index_fd, index, (first - 1) * _INDEX.size)
            self._records_end = end
        # a batch's nodes fill runs of consecutive positions: one write per run
        run: list[bytes] = []
        start = 0
        for pos, digest in sorted((merkle.position(lv, i), h) for lv, i, h in self._nodes):
            if run and pos != start + len(run):
                _write(self._hashes_fd, b"".join(run), start * merkle.HASH_SIZE)
                run = []
            if not run:
                start = pos
            run.append(digest)
        if run:
            _write(self._hashes_fd, b"".join(run), start * merkle.HASH_SIZE)
        self._nodes.clear()
        self.records.clear()

    def nodes(self) -> merkle.GetNode:
        """``get(level, index)`` over the recomputed perfect nodes."""
        self.flush()
        fd = self._hashes_fd

        def get(level: int, idx: int) -> bytes:
            digest = os.pread(fd, merkle.HASH_SIZE, merkle.position(level, idx) * merkle.HASH_SIZE)
            if len(digest) != merkle.HASH_SIZE or not any(digest):
                raise LookupError(f"merkle node ({level}, {idx}) is not in the replayed tree")
            return digest

        return get


def _write(fd: int, data: bytes | bytearray, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


class AlreadyAdmitted(Refused):
    default_code = "DUPLICATE_ENTRY"

    def __init__(self, first: int) -> None:
        where = f" at sequence {first}" if first else ""
        super().__init__(f"the same document was already admitted{where}", first=first)
