"""A witness's durable state: per log origin, the latest checkpoint it cosigned.

The tlog-witness race (two requests checked against the same old size, the later persist
rolling the size back) is closed by :meth:`WitnessState.update`: the read of the stored size,
the caller's checks and cosigning, and the write run in one ``BEGIN IMMEDIATE`` transaction, and
the commit is synced (``synchronous=FULL`` in WAL mode) before the cosignature leaves the
process.  ``BEGIN IMMEDIATE`` also serialises several processes serving the same directory.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from alexandria.store import schema

T = TypeVar("T")


@dataclass(frozen=True)
class Witnessed:
    """The latest checkpoint cosigned for one origin."""

    origin: str
    size: int
    root: bytes
    checkpoint: str
    cosigned_at: int


class WitnessState:
    """The ``witnessed`` table of ``witness.db``; one connection, used under a lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.executescript(schema.WITNESS)
        self._conn = conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def latest(self, origin: str) -> Witnessed | None:
        with self._lock:
            return _read(self._conn, origin)

    def update(self, origin: str, decide: Callable[[Witnessed | None], tuple[Witnessed, T]]) -> T:
        """Atomically: read ``origin``'s record, let ``decide`` check the request against it
        (raising to refuse) and return the new record and a result; store the record; commit
        (synced); return the result."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                new, result = decide(_read(conn, origin))
                conn.execute(
                    "INSERT INTO witnessed(origin, size, root, checkpoint, cosigned_at)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT(origin) DO UPDATE SET"
                    " size = excluded.size, root = excluded.root,"
                    " checkpoint = excluded.checkpoint, cosigned_at = excluded.cosigned_at",
                    (new.origin, new.size, new.root, new.checkpoint, new.cosigned_at),
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result


def _read(conn: sqlite3.Connection, origin: str) -> Witnessed | None:
    row = conn.execute(
        "SELECT origin, size, root, checkpoint, cosigned_at FROM witnessed WHERE origin = ?",
        (origin,),
    ).fetchone()
    if row is None:
        return None
    return Witnessed(row[0], int(row[1]), bytes(row[2]), row[3], int(row[4]))
