"""WAL checkpoints off the writer's path.

SQLite normally checkpoints inside the ``COMMIT`` that pushes the write-ahead log past
``wal_autocheckpoint`` pages: that admission batch then also copies every page of the log back
into the database file, which costs the writer as much as the admissions themselves.  The
writer connection turns automatic checkpoints off and, after each commit, ``kick``s this thread,
which runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection at most every ``PERIOD``
seconds.  A passive checkpoint never blocks writers or readers, and SQLite releases the GIL
while it copies, so the work moves to the other core.  Durability is unchanged: a commit is
durable once its WAL frames are synced (``synchronous=FULL``), checkpointed or not.

A checkpoint beside a busy writer never quite catches up: by the time it has copied the frames
it saw, newer ones have been committed, and SQLite starts the log over from its beginning only
when a write transaction begins with every frame copied.  Left alone, the log grows for as long
as admissions keep coming (670 MB in six seconds of the admission benchmark, each commit
appending to an ever longer file).  So when a checkpoint finds more than ``RESTART_FRAMES``
frames in the log it sets ``catch_up``, and the writer, between two transactions, copies the
few frames still left itself (``catch_up_on``): its next transaction then starts the log over.

The writer does not wait for that: while this thread is copying (it starts on the very commit
the writer would catch up after), the writer goes on and tries again after its next batch.
With batches of a few hundred admissions the checkpoint is done long before, and the log
starts over at about ``RESTART_FRAMES``.  A bulk load's transactions are larger than that (a
batch of 2,000 admissions writes ~120 MB of frames into a library of a million entries), this
thread is still copying the last one whenever the writer looks, and the log grows for several
batches before a catch-up finds it idle.  Two things keep that cheap and bounded:

- the log file is not cut back when the log starts over unless it is longer than
  ``JOURNAL_SIZE_LIMIT``, so later frames overwrite blocks the file already has.  Cut back to a
  small limit, the file would regrow by hundreds of megabytes each time, every new block
  allocated and zero-filled, a large share of the writer's time in a bulk load
  (bench/results/journal.md);
- past ``LIMIT_FRAMES`` the writer waits for this thread's checkpoint to end and finishes it
  itself, so the log starts over at the next transaction: one pause of one checkpoint, and the
  log never outgrows ``LIMIT_FRAMES`` plus one transaction.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

PERIOD = 0.05  # seconds between two checkpoints, at most one per kick
RESTART_FRAMES = 16_384  # a log this long (64 MiB of 4 KiB pages) is started over when it can be
LIMIT_FRAMES = 131_072  # a log this long (512 MiB) is started over before the next transaction
# a log file left longer is cut back to this when the log starts over: above the longest log
# of LIMIT_FRAMES and one large transaction, so that a bulk load reuses the file's blocks
JOURNAL_SIZE_LIMIT = 1024 * 1024 * 1024


class WalCheckpointer:
    def __init__(self, path: str) -> None:
        self._path = path
        self._kick = threading.Event()
        self._stop = False
        self.catch_up = False  # the log is long: the writer should finish a checkpoint
        self.overdue = False  # the log is too long: the writer must, waiting for this thread
        self._copying = threading.Lock()  # held by whichever thread is checkpointing
        self._thread = threading.Thread(target=self._run, name="wal-checkpointer", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        self._kick.set()

    def close(self) -> None:
        self._stop = True
        self._kick.set()
        self._thread.join()

    def catch_up_on(self, conn: sqlite3.Connection) -> None:
        """Run by the writer on its own connection, outside any transaction, when ``catch_up``
        is set: with no write in progress a passive checkpoint copies every frame, and the
        writer's next transaction starts the log over.  While this thread is checkpointing the
        writer tries again after its next transaction, unless the log is ``overdue``: then it
        waits for this thread's checkpoint to end first.  Busy (another process is
        checkpointing): it tries again after its next transaction."""
        if not self._copying.acquire(blocking=self.overdue):
            return
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if not busy and frames == copied:
                self.catch_up = self.overdue = False
        except sqlite3.Error as exc:
            logging.getLogger(__name__).warning("WAL checkpoint failed: %s", exc)
        finally:
            self._copying.release()

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
                    with self._copying:  # the flags too: a catch-up may clear them next
                        _busy, frames, _copied = conn.execute(
                            "PRAGMA wal_checkpoint(PASSIVE)"
                        ).fetchone()
                        self.overdue = frames >= LIMIT_FRAMES
                        self.catch_up = frames >= RESTART_FRAMES
                except sqlite3.Error as exc:  # e.g. another process is checkpointing
                    logging.getLogger(__name__).warning("WAL checkpoint failed: %s", exc)
                if not self._stop:  # let the next batches' frames gather before copying again
                    time.sleep(PERIOD)
        finally:
            conn.close()
