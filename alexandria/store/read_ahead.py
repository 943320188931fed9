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
reader's one snapshot, so a commit between the two changes nothing but what is warm.  The one
exception is ``fetch``, for rows that never change once written (a revision and its leaf, by
sequence): those it returns, and the reader uses them instead of reading the same pages again
one by one (each read a system call, even from the operating system's cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from alexandria.store.read_connections import ThreadConnections

THREADS = 8  # requests in flight at once
CACHE_KIB = 2_048  # each connection's page cache: the upper levels of log and revisions
MINIMUM = 8  # fewer rows than this are read by the reader alone: the hand-offs cost more

# What is read ahead, by name: the pages of everything ``LedgerStorage.signed_many`` reads for
# a sequence (the leaf itself, so that a leaf spilling onto overflow pages brings them too); a
# head's stored words (``reads/catalogue._relevance`` counts in them); an object's row, by its
# first sequence; an object's row with its head's record, by its first sequence, in one round
# (``reads/objects``: a section's heads are found through the rows, so reading the rows first
# and the records after would wait for the disk twice); a vote's head revision's id and its
# target's score, by (head sequence, target's first sequence) (``reads/scores``: both come
# from the covering index).
_ROWS_SQL = {
    "records": "SELECT r.id, l.leaf FROM revisions r JOIN log l ON l.sequence = r.sequence"
               " WHERE r.sequence = ?",
    "catalogue_words": "SELECT length(title), length(body) FROM catalogue_words WHERE seq = ?",
    "objects": "SELECT head_sequence FROM objects WHERE created_sequence = ?",
    "object_records": "SELECT r.id, l.leaf FROM objects o"
                      " JOIN revisions r ON r.sequence = o.head_sequence"
                      " JOIN log l ON l.sequence = r.sequence WHERE o.created_sequence = ?",
    "votes": "SELECT (SELECT id FROM revisions WHERE sequence = ?),"
             " (SELECT c.score FROM objects o JOIN catalogue c ON c.seq = o.head_sequence"
             "  WHERE o.created_sequence = ?)",
}

#: A row's key: one value, or a tuple of one value per parameter of its SQL
Key = int | str | tuple[int | str, ...]


class ReadAhead:
    """``threads`` read-only connections that fetch rows of a page concurrently."""

    def __init__(self, path: str, threads: int = THREADS, cache_kib: int = CACHE_KIB) -> None:
        self.path = path
        self._connections = ThreadConnections(path, cache_kib)
        self._threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="alexandria-ahead")

    def _fetch(self, sql: str, sequences: Sequence[Key]) -> None:
        conn = self._connections.connection()
        for seq in sequences:
            conn.execute(sql, seq if isinstance(seq, tuple) else (seq,)).fetchone()

    def rows(self, what: str, sequences: Sequence[Key]) -> None:
        """Bring the pages of the rows ``what`` (a key of ``_ROWS_SQL``) at ``sequences`` (their
        keys) into memory, several at once; returns when all are read.  Best effort: a failure
        here leaves the reader to read them itself."""
        sql = _ROWS_SQL[what]
        if len(sequences) < MINIMUM:
            return
        lanes = [sequences[i :: self._threads] for i in range(self._threads)]
        done, _ = wait([self._pool.submit(self._fetch, sql, lane) for lane in lanes if lane])
        for future in done:
            future.exception()  # retrieved, so a failed read-ahead is not logged as unhandled

    def _fetch_rows(self, sql: str, keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        conn = self._connections.connection()
        out = {}
        for key in keys:
            row = conn.execute(sql, (key,)).fetchone()
            if row is not None:
                out[key] = tuple(row)
        return out

    def fetch(self, sql: str, keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """The row ``sql`` selects for each key (its one parameter), read several at once and
        returned: only for rows that never change once written (a revision and its leaf), so
        that a row read on these connections is the one the reader's snapshot holds.  A key
        without a row, or whose read failed, is left out: the reader reads it itself."""
        if len(keys) < MINIMUM:
            return {}
        lanes = [keys[i :: self._threads] for i in range(self._threads)]
        done, _ = wait([self._pool.submit(self._fetch_rows, sql, lane) for lane in lanes if lane])
        out: dict[int, tuple[Any, ...]] = {}
        for future in done:
            if future.exception() is None:
                out.update(future.result())
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._connections.close()
