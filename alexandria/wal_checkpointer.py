"""WAL checkpoints off the writer's path.

SQLite normally checkpoints inside the ``COMMIT`` that pushes the write-ahead log past
``wal_autocheckpoint`` pages: that admission batch then also copies every page of the log back
into the database file, which costs the writer as much as the admissions themselves.  The
writer connection turns automatic checkpoints off and, after each commit, ``kick``s this thread,
which runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection at most every ``PERIOD``
seconds.  A passive checkpoint never blocks writers or readers, and SQLite releases the GIL
while it copies, so the work moves to the other core.  Durability is unchanged: a commit is
durable once its WAL frames are synced (``synchronous=FULL``), checkpointed or not.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

PERIOD = 0.05  # seconds between two checkpoints, at most one per kick


class WalCheckpointer:
    def __init__(self, path: str) -> None:
        self._path = path
        self._kick = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="wal-checkpointer", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        self._kick.set()

    def close(self) -> None:
        self._stop = True
        self._kick.set()
        self._thread.join()

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 1000")
            while True:
                self._kick.wait()
                if self._stop:
                    return
                self._kick.clear()
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # e.g. another process is checkpointing
                    logging.getLogger(__name__).warning("WAL checkpoint failed: %s", exc)
                if not self._stop:  # let the next batches' frames gather before copying again
                    time.sleep(PERIOD)
        finally:
            conn.close()
