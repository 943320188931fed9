"""The largest checkpoint a library has published, kept in its database, and the check that
the log a node extends is that history.

A signed checkpoint commits the library to the root of its first ``size`` leaves.  A database
restored from an older backup has forgotten the entries admitted (and acknowledged) after the
backup; one whose first ``size`` leaves have another root (a backup of another history, or
writes admitted on a database that was behind) is a fork.  Admitting on either would
acknowledge entries that can never be covered by a checkpoint consistent with the published
one.  So every place that knows of a published checkpoint feeds it here:

- the database's ``meta`` row ``published_checkpoint`` (the signed note): written in the same
  transaction as each checkpoint (``service/checkpoint_signer.py``), carried over by
  ``restore --replace`` from the database it replaces (``store/backup.py``, PostgreSQL too), and
  raised by a node from ``LOG_KEY.published`` (``service/published.py``) when it opens — so on
  PostgreSQL every node sees the largest checkpoint any node served;
- the latest row of ``checkpoints`` (a database of an earlier layout has no ``meta`` row).

:func:`log_problem` compares a tree with each: fewer leaves is ``CATCH_UP_REQUIRED`` (the tail
is replayed from a mirror or an export), another root at that size is ``LOG_FORKED``.  The
writer checks it inside each write transaction that appends to the log whenever the database
may have changed under it (``Writer._log_refusal``), so a node never acknowledges a
write it could not sign.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from alexandria.core import merkle
from alexandria.core.checkpoint import CheckpointError, parse_checkpoint
from alexandria.errors import Failed
from alexandria.store.merkle_nodes import read_together, tree_size

META_KEY = "published_checkpoint"


class CatchUpRequired(Failed):
    """The database is behind the checkpoint this library published (a restore from an older
    backup): reads are served, writes and checkpoints wait for the missing tail."""

    default_code = "CATCH_UP_REQUIRED"


class LogForked(Failed):
    """The database's first ``size`` leaves do not have the root of a checkpoint this library
    published: it is another history, and nothing is admitted or signed on it."""

    default_code = "LOG_FORKED"


@dataclass(frozen=True)
class Published:
    size: int
    root: bytes
    note: str


def parse_note(note: str) -> Published | None:
    """The size and root of a checkpoint note (None if it is not one)."""
    try:
        cp, _sigs = parse_checkpoint(note)
    except CheckpointError:
        return None
    return Published(cp.size, cp.root, note)


def read_floor(conn: sqlite3.Connection) -> list[Published]:
    """What the database knows was published: its ``meta`` row and its latest checkpoint."""
    out: list[Published] = []
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()
    if row is not None:
        found = parse_note(str(row[0]))
        if found is not None:
            out.append(found)
    row = conn.execute(
        "SELECT size, root, note FROM checkpoints ORDER BY size DESC LIMIT 1"
    ).fetchone()
    if row is not None and not any(p.size == row[0] for p in out):
        out.append(Published(int(row[0]), bytes(row[1]), str(row[2])))
    return out


def largest(floors: Iterable[Published]) -> Published | None:
    return max(floors, key=lambda p: p.size, default=None)


def raise_floor(conn: sqlite3.Connection, note: str) -> bool:
    """Record ``note`` as the published checkpoint unless a larger one is recorded (inside
    the caller's write transaction); True when it was recorded."""
    new = parse_note(note)
    if new is None:
        raise ValueError("not a checkpoint note")
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()
    if row is not None:
        old = parse_note(str(row[0]))
        if old is not None and old.size >= new.size:
            return False
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (note, META_KEY))
    else:
        conn.execute("INSERT INTO meta(key, value) VALUES (?, ?)", (META_KEY, note))
    return True


def behind_message(published: Published, size: int) -> str:
    return (
        f"this library published a checkpoint of size {published.size} but its database"
        f" holds {size} leaves (restored from an older backup?): it serves reads but takes"
        " no writes and signs no checkpoint until the missing entries are replayed. Stop"
        " nothing; run `alexandria restore --db DB --catch-up URL` with the URL of a mirror"
        " (or of an export file: --catch-up FILE)"
    )


FORKED_ADVICE = (
    "It serves reads but takes no writes and signs nothing. Stop the server and restore a"
    " backup at least as new as that checkpoint (`alexandria restore BACKUP --db DB"
    " --replace`), or an older backup of this history followed by `alexandria restore --db DB"
    " --catch-up URL` from a mirror or an export"
)


def forked_message(published: Published) -> str:
    return (
        f"the first {published.size} leaves of the database do not have the root of the"
        f" checkpoint of size {published.size} this library published: the database is not"
        " this library's history (a backup of another history, or entries admitted on a"
        " restored database that was behind). " + FORKED_ADVICE
    )


def _root_at(conn: sqlite3.Connection, size: int) -> bytes:
    """The root of the first ``size`` leaves, its nodes read by one statement (a round trip
    on PostgreSQL)."""
    return read_together(conn, lambda get: merkle.root_hash(size, get))


def log_problem(conn: sqlite3.Connection, floors: Iterable[Published],
                size: int | None = None) -> Failed | None:
    """Why a node must not extend the log in ``conn`` (of ``size`` leaves, read if not
    given): a fork of any of ``floors`` first, then the largest it lacks leaves of."""
    if size is None:
        size = tree_size(conn)
    behind: Published | None = None
    for published in floors:
        if size < published.size:
            if behind is None or published.size > behind.size:
                behind = published
            continue
        root = _root_at(conn, published.size)
        if root != published.root:
            return LogForked(forked_message(published), published_size=published.size,
                             published_root=published.root.hex(), root=root.hex(),
                             tree_size=size)
    if behind is not None:
        return CatchUpRequired(behind_message(behind, size), published_size=behind.size,
                               tree_size=size)
    return None
