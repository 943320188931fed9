"""Who is using a library's database: a shared lock every open storage holds for its lifetime,
and the exclusive lock ``restore --replace`` and ``migrate`` take first.

A restore that replaces the database under a running server loses what the server admits
afterwards (SQLite: it keeps writing into the replaced file; PostgreSQL: its admissions are
truncated by the copy or land on top of it), and a migrate from a SQLite file a server still
writes to misses what it admits after the copy began.  So:

- **SQLite**: every process with the database open (the server's processes, a mirror, a
  ``restore --catch-up``) holds a shared ``flock`` on ``DB.lock`` beside it; ``restore
  --replace`` and ``migrate`` take it exclusively, without waiting, or refuse
  (``DATABASE_IN_USE``, saying to stop the server).  A lock file, not the database file itself:
  SQLite's own POSIX locks on the database would be dropped when this process closed another
  descriptor of it.  The kernel releases a lock when its holder dies, also on ``kill -9``.
- **PostgreSQL**: every node's write connection holds a session-level shared advisory lock
  (``LOCK_KEY``) for as long as it is connected; ``restore --replace`` and ``migrate`` take it
  exclusively on their own connection or refuse, naming the sessions that hold it
  (``pg_locks``), once the sessions of a node that just stopped had two seconds to end.

A storage that cannot take its shared lock because a restore or a migrate holds it refuses to
open (``DATABASE_LOCKED``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from alexandria.errors import Failed

SUFFIX = ".lock"
#: the advisory lock key of a library's PostgreSQL database (``'alex'``: one per database)
LOCK_KEY = 0x616C6578


class DatabaseInUse(Failed):
    """``restore --replace`` or ``migrate`` while a server uses the database."""

    default_code = "DATABASE_IN_USE"


class DatabaseLocked(Failed):
    """A server starting while ``restore --replace`` or ``migrate`` works on its database."""

    default_code = "DATABASE_LOCKED"


def lock_path(db: str | Path) -> Path:
    return Path(f"{db}{SUFFIX}")


def _open(db: str | Path) -> int:
    return os.open(lock_path(db), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


class SharedLock:
    """The shared lock of one open SQLite storage (``acquire`` … ``release``)."""

    def __init__(self, db: str | Path) -> None:
        self.db = str(db)
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        fd = _open(self.db)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DatabaseLocked(
                f"{self.db} is being restored or migrated (`alexandria restore --replace` or"
                " `alexandria migrate` holds it): start the server once that command has"
                " finished", path=self.db) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None


def in_use_message(db: str, doing: str, users: str = "") -> str:
    return (f"a server is using {db}{users}: stop it (every process and node serving it,"
            f" mirrors and catch-ups included) before {doing}; nothing was changed")


@contextlib.contextmanager
def exclusive(db: str | Path, doing: str) -> Iterator[None]:
    """The SQLite database ``db`` for ``restore --replace`` or ``migrate`` alone (``doing``
    names it in the refusal)."""
    fd = _open(db)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatabaseInUse(in_use_message(str(db), doing), path=str(db)) from None
        yield
    finally:
        os.close(fd)


# --- PostgreSQL --------------------------------------------------------------------------------

def pg_shared(raw: Any, name: str) -> None:
    """Take a node's shared advisory lock on its write connection ``raw`` (psycopg)."""
    row = raw.execute("SELECT pg_try_advisory_lock_shared(%s)", (LOCK_KEY,)).fetchone()
    if not row[0]:
        raise DatabaseLocked(
            f"{name} is being restored or migrated (`alexandria restore --replace` or"
            " `alexandria migrate` holds it): start the node once that command has finished",
            db=name)


#: how long ``pg_exclusive`` waits for the sessions holding the shared lock to end: a node
#: that just stopped closed its connections, but their backends may not have ended yet
SESSIONS_ENDING_S = 2.0


def pg_exclusive(raw: Any, name: str, doing: str) -> None:
    """Take the exclusive advisory lock on ``raw`` (for the session), or refuse naming the
    sessions of the nodes that hold it (after ``SESSIONS_ENDING_S``)."""
    deadline = time.monotonic() + SESSIONS_ENDING_S
    while not raw.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]:
        if time.monotonic() >= deadline:
            _refuse_exclusive(raw, name, doing)
        time.sleep(0.05)


def _refuse_exclusive(raw: Any, name: str, doing: str) -> NoReturn:
    """Refuse ``pg_exclusive``, naming the sessions that hold the shared lock."""
    holders = raw.execute(
        "SELECT l.pid, coalesce(a.client_addr::text, 'local'), a.application_name"
        " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.classid = 0 AND l.objid = %s"
        " AND l.objsubid = 1 AND l.granted AND l.database ="
        " (SELECT oid FROM pg_database WHERE datname = current_database())"
        " ORDER BY l.pid", (LOCK_KEY,)).fetchall()
    users = ", ".join(f"backend pid {pid} from {addr}" for pid, addr, _app in holders)
    raise DatabaseInUse(in_use_message(name, doing, f" ({len(holders)} node sessions: {users})"
                                       if holders else ""),
                        db=name, sessions=len(holders))
