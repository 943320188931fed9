"""Read-ahead: the pages of a page of records, read from disk in parallel before they are used.

A page of a list (the catalogue, an object's children, a discussion) names up to 50 records
admitted at scattered times, each in its own leaf pages of ``revisions`` and ``log``.  When the
library is larger than the host's memory those pages are on disk, and one connection reads them
one after another: 50 to 100 waits for the disk, each a full round trip.  Disks (and virtual
ones most of all) answer many requests at once about as fast as one, so before the reader's
connection assembles the page, ``ReadAhead.rows`` has a few connections of its own, each on its
own thread (SQLite releases the GIL while it reads), fetch the same rows at once: the operating
system keeps what they read, and the reader then finds every page in memory.

It reads through its own snapshots and returns nothing: what is served still comes from the
reader's one snapshot, so a commit between the two changes nothing but what is warm.  The
exception is rows that never change once written (a revision and its leaf, by sequence): those
``fetch`` returns, and those ``rows`` read as records (``KEPT``) it keeps for the thread that
asked until it takes them (``kept``), so the reader uses them instead of reading the same pages
again one by one (each read a system call, even from the operating system's cache), or the
read-ahead fetching them a second time.

``THREADS`` is 4: beyond a few threads, their hand-offs of the interpreter's lock cost more than
the disk gains from a deeper queue of reads (bench/results/journal.md).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, cast

from alexandria.store.read_connections import ThreadConnections
from alexandria.store.schema import signed_sql

THREADS = 4  # requests in flight at once
CACHE_KIB = 2_048  # each connection's page cache: the upper levels of log and revisions
MINIMUM = 8  # fewer rows than this are read by the reader alone: the hand-offs cost more

# What is read ahead, by name: everything ``SignedRecords.signed_many`` reads for a sequence
# (the leaf itself, so that a leaf spilling onto overflow pages brings them too); a head's
# stored words (``reads/catalogue._relevance`` counts in them); an object's row, by its first
# sequence; an object's row with its head's record, by its first sequence, in one round
# (``reads/objects``: a section's heads are found through the rows, so reading the rows first
# and the records after would wait for the disk twice); a vote target's score, by its first
# sequence (``reads/scores``: the rest of a vote comes from the covering index).
_ROWS_SQL = {
    "records": signed_sql("l.sequence = ?"),
    "catalogue_words": "SELECT length(title), length(body) FROM catalogue_words WHERE seq = ?",
    "objects": "SELECT head_sequence FROM objects WHERE created_sequence = ?",
    "object_records": signed_sql(
        "l.sequence = (SELECT head_sequence FROM objects WHERE created_sequence = ?)"),
    "object_scores": "SELECT score FROM object_scores WHERE created_sequence = ?",
}

#: A row's key: one value, or a tuple of one value per parameter of its SQL
Key = int | str | tuple[int | str, ...]
#: What ``rows`` reads as records (``schema.SIGNED_COLUMNS``), kept by revision sequence
KEPT = frozenset({"records", "object_records"})
#: the column of ``SIGNED_COLUMNS`` holding the revision's sequence
_SEQUENCE = 2


class ReadAhead:
    """``threads`` read-only connections that fetch rows of a page concurrently."""

    def __init__(self, path: str, threads: int = THREADS, cache_kib: int = CACHE_KIB) -> None:
        self.path = path
        self._connections = ThreadConnections(path, cache_kib)
        self._threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="alexandria-ahead")
        self._local = threading.local()  # each asking thread's kept records

    def _fetch(self, sql: str, keys: Sequence[Key]) -> list[tuple[Key, tuple[Any, ...]]]:
        """One lane: each key's row, on this thread's connection (a key without one left out)."""
        conn = self._connections.connection()
        out = []
        for key in keys:
            row = conn.execute(sql, key if isinstance(key, tuple) else (key,)).fetchone()
            if row is not None:
                out.append((key, tuple(row)))
        return out

    def _read(self, sql: str, keys: Sequence[Key]) -> list[tuple[Key, tuple[Any, ...]]]:
        """Each key's row, read by ``threads`` lanes at once; a failed lane's rows left out."""
        lanes = [keys[i :: self._threads] for i in range(self._threads)]
        done, _ = wait([self._pool.submit(self._fetch, sql, lane) for lane in lanes if lane])
        out: list[tuple[Key, tuple[Any, ...]]] = []
        for future in done:
            # retrieved either way, so a failed read-ahead is not logged as unhandled
            if future.exception() is None:
                out += future.result()
        return out

    def rows(self, what: str, sequences: Sequence[Key]) -> None:
        """Bring the pages of the rows ``what`` (a key of ``_ROWS_SQL``) at ``sequences`` (their
        keys) into memory, several at once; returns when all are read.  Records (``KEPT``) are
        kept for this thread's next ``kept``, in place of any it kept before.  Best effort: a
        failure here leaves the reader to read them itself."""
        sql = _ROWS_SQL[what]
        if len(sequences) < MINIMUM:
            return
        found = self._read(sql, sequences)
        if what in KEPT:  # in place of any kept before: one page's records at most
            self._local.kept = {int(row[_SEQUENCE]): row for _key, row in found}

    def kept(self, sequences: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """The records (``schema.SIGNED_COLUMNS``) at ``sequences`` that this thread's read-ahead
        of records read since its last call, by revision sequence; the rest are dropped.  A
        revision and its leaf never change once admitted, so they are the rows the reader's
        snapshot holds for any sequence it found."""
        kept: dict[int, tuple[Any, ...]] = self._local.__dict__.pop("kept", {})
        return {seq: kept[seq] for seq in sequences if seq in kept}

    def fetch(self, sql: str, keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """The row ``sql`` selects for each key (its one parameter), read several at once and
        returned: only for rows that never change once written (a revision and its leaf), so
        that a row read on these connections is the one the reader's snapshot holds.  A key
        without a row, or whose read failed, is left out: the reader reads it itself."""
        if len(keys) < MINIMUM:
            return {}
        return {cast(int, key): row for key, row in self._read(sql, keys)}

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._connections.close()
