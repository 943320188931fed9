"""Signed-record assembly: a revision's ``JCS(signed record)`` spliced from its stored leaf, its
``log`` row and its authority certificate (``core/records.signed_record_bytes``), never stored
whole.  Used by the admission (a retry's answer, a new record's authority) on the writer's
connection and by the read models on a read connection, the same way over either backend.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from alexandria.core.leaf import document_of
from alexandria.core.records import admission_bytes, signed_record_bytes
from alexandria.errors import Failed
from alexandria.store import schema
from alexandria.store.protocol import ReadBackend

SIGNED_CHUNK = 500  # signed records read by one statement (``signed_many``)


class SignedRecords:
    """The assembly of signed records, with the rows ``reader``'s read-ahead fetched several
    at once (``ReadBackend.fetch_ahead``/``kept_ahead``) and the authority certificates'
    bytes (immutable once admitted) remembered."""

    def __init__(self, reader: ReadBackend) -> None:
        self._reader = reader
        self._authority_bytes: dict[int, bytes] = {}

    def authority_document(self, conn: sqlite3.Connection, seq: int) -> bytes:
        """The stored bytes of the authority certificate admitted at ``seq``."""
        data = self._authority_bytes.get(seq)
        if data is None:
            row = conn.execute(
                "SELECT document FROM authorities WHERE sequence = ?", (seq,)
            ).fetchone()
            if row is None:
                raise Failed(f"authority certificate {seq} is missing", "LOG_CORRUPT")
            data = self._authority_bytes[seq] = bytes(row[0])
        return data

    def assemble(self, conn: sqlite3.Connection, row: Sequence[Any]) -> bytes:
        """The signed record of a row of ``schema.signed_sql``."""
        rev_id, root, seq, rlen, aseq, leaf, admitted_at = row
        adm = admission_bytes(seq, admitted_at, self.authority_document(conn, aseq))
        return signed_record_bytes(document_of(bytes(leaf)), rlen, rev_id, root, adm)

    def signed(self, conn: sqlite3.Connection, sequence: int) -> bytes | None:
        """The signed record of the revision at ``sequence``, None if there is none."""
        row = conn.execute(schema.signed_sql("l.sequence = ?"), (sequence,)).fetchone()
        return None if row is None else self.assemble(conn, row)

    def signed_many(self, conn: sqlite3.Connection, sequences: Sequence[int]) -> list[bytes]:
        """Signed records for the given revision sequences, in the given order (a sequence
        with no revision is left out).  One statement per ``SIGNED_CHUNK`` records: on
        PostgreSQL each statement is a round trip to the server."""
        wanted = list(dict.fromkeys(sequences))
        # a revision and its leaf never change once admitted: rows read ahead, several at once,
        # are the ones this snapshot holds (callers pass sequences found in ``conn``'s snapshot,
        # and later snapshots only add rows) -- those a read-ahead of the page kept, then the
        # rest fetched together
        found: dict[int, Sequence[Any]] = dict(self._reader.kept_ahead(wanted))
        wanted = [seq for seq in wanted if seq not in found]
        found.update(self._reader.fetch_ahead(schema.signed_sql("l.sequence = ?"), wanted))
        wanted = [seq for seq in wanted if seq not in found]
        for i in range(0, len(wanted), SIGNED_CHUNK):
            chunk = wanted[i:i + SIGNED_CHUNK]
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(schema.signed_sql(f"l.sequence IN ({marks})"), chunk):
                found[int(row[2])] = row
        return [self.assemble(conn, found[seq]) for seq in sequences if seq in found]

    def entry(self, conn: sqlite3.Connection, rev: str) -> bytes | None:
        """The signed record of revision ``rev``."""
        row = conn.execute(schema.signed_sql(
            f"l.sequence = (SELECT sequence FROM revisions WHERE {schema.revision_id('?')})"
        ), (rev, rev)).fetchone()
        return None if row is None else self.assemble(conn, row)

    def head_entry(self, conn: sqlite3.Connection, rev: str) -> bytes | None:
        """The signed record of the current head of the object ``rev`` belongs to."""
        row = conn.execute(
            "SELECT o.head_sequence FROM revisions r JOIN revisions f"
            f" ON {schema.revision_id('r.root', 'f.id')}"
            " JOIN objects o ON o.created_sequence = f.sequence"
            f" WHERE {schema.revision_id('?', 'r.id')}", (rev, rev),
        ).fetchone()
        return None if row is None else self.signed(conn, row[0])
