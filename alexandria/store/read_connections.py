"""Read-only SQLite connections, one per thread of a pool: the readers' (``store/sqlite.py``)
and the read-ahead's (``store/read_ahead.py``)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable


class ThreadConnections:
    """Each thread's own read-only connection to ``path`` (opened on first use, with
    ``cache_kib`` of page cache), all closed together.  ``progress``: each connection's
    progress handler, called every ``progress_steps`` instructions (``store/query_budget.py``)."""

    def __init__(self, path: str, cache_kib: int, progress: Callable[[], int] | None = None,
                 progress_steps: int = 100_000) -> None:
        self.path = path
        self.cache_kib = cache_kib
        self._progress = progress
        self._progress_steps = progress_steps
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA query_only = 1")
            conn.execute(f"PRAGMA cache_size = -{self.cache_kib}")
            if self._progress is not None:
                conn.set_progress_handler(self._progress, self._progress_steps)
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    @property
    def opened(self) -> list[sqlite3.Connection]:
        """The connections opened so far."""
        with self._lock:
            return list(self._opened)

    def close(self) -> None:
        """Close every connection (after the pool's threads stopped using them)."""
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
