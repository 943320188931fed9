"""Online backups and restores of a library (``alexandria backup`` / ``restore``).

A backup is always a SQLite library file.  Of a SQLite library it is made as below; of a
PostgreSQL library (``--db postgresql://…``) from one snapshot of the database
(``store/postgresql/backup.py``), and restoring it into PostgreSQL is ``migrate`` with
``replace``.  Either way the file can be described, exported, served and restored into either
backend.

A backup uses SQLite's online backup API in a single step: it reads the whole database under
one read transaction, so the copy is one consistent snapshot of a committed state, while the
library keeps admitting (in WAL mode a reader never blocks the writer).  It is written beside
its destination, checked (``PRAGMA quick_check``) and renamed into place, so a crash leaves no
half backup.

A restore copies a backup over the database the same way.  The server must be stopped, and
the restore refuses while it is not (``store/db_lock.py``): the database's old write-ahead log
is removed first (SQLite would otherwise replay its frames into the restored file).  The
largest checkpoint the replaced database had published is carried into the restored one
(``store/log_floor.py``): what the backup lacks — everything admitted after it — is then
replayed by ``--catch-up`` (``service/follow.py``), and until then the library refuses writes and
checkpoints; a backup that forks that checkpoint is refused.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from alexandria.errors import Failed, Malformed
from alexandria.store import db_lock, log_floor, migrations
from alexandria.store.backends import display, has_library, open_readonly
from alexandria.store.log_floor import Published
from alexandria.store.merkle_nodes import tree_size
from alexandria.store.postgresql import is_database_url


@dataclass(frozen=True)
class Snapshot:
    path: str
    genesis_pin: str
    size: int  # leaves in the log
    bytes: int


def _open_ro(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise Malformed(f"{path}: no such database", "NO_DATABASE", path=str(path))
    return sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)


def _describe(conn: sqlite3.Connection, path: Path | str) -> tuple[str, int]:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'genesis_pin'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise Malformed(f"{path} is not an Alexandria database: {exc}", "NOT_A_LIBRARY",
                        path=str(path)) from exc
    if row is None:
        raise Malformed(f"{path} is not an Alexandria database", "NOT_A_LIBRARY",
                        path=str(path))
    return str(row[0]), tree_size(conn)


def stored_genesis(db: str | Path) -> dict[str, Any]:
    """The genesis document a library's database (a file or a PostgreSQL URL) was created
    for."""
    with open_readonly(db) as conn:
        _describe(conn, display(db))
        row = conn.execute("SELECT value FROM meta WHERE key = 'genesis'").fetchone()
        value: dict[str, Any] = orjson.loads(row[0])
        return value


def _copy(source: sqlite3.Connection, target: Path) -> None:
    """Everything in ``source`` (one consistent snapshot) into a new file ``target``."""
    if not target.parent.is_dir():
        raise Malformed(f"{target.parent}: no such directory", "NO_DIRECTORY",
                        path=str(target.parent))
    target.unlink(missing_ok=True)
    try:
        dest = sqlite3.connect(target)
        try:
            source.backup(dest)  # pages=-1: one step, one read transaction
            _single_file(dest)
            check = dest.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            dest.close()
    except sqlite3.Error as exc:
        raise Failed(f"copying the database failed: {exc}", "COPY_FAILED") from exc
    _check_and_sync(target, check)


def _single_file(dest: sqlite3.Connection) -> None:
    """The copy in rollback-journal mode: a file that stands alone.  A copy of a WAL library
    is a WAL database, and every read-only look at one (``describe``, ``export --db``) leaves
    an empty ``-wal`` and ``-shm`` beside it; the server puts a restored library back in WAL
    mode when it opens it."""
    dest.execute("PRAGMA journal_mode = DELETE")


def _check_and_sync(target: Path, check: str | None = None) -> None:
    """Refuse a copy that fails ``quick_check``; then its bytes on disk."""
    if check is None:
        dest = sqlite3.connect(target)
        try:
            _single_file(dest)
            check = str(dest.execute("PRAGMA quick_check").fetchone()[0])
        finally:
            dest.close()
    if check != "ok":
        raise Failed(f"the copy does not pass quick_check: {check}", "COPY_CORRUPT")
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup(db: str | Path, out: str | Path) -> Snapshot:
    """A consistent copy of the database ``db`` (a file or a PostgreSQL URL) at ``out`` (which
    must not exist), taken while a library may be serving from ``db``."""
    out = Path(out)
    if out.exists():
        raise Malformed(f"{out} exists: a backup never replaces a file", "BACKUP_EXISTS",
                        path=str(out))
    tmp = out.with_name(f".{out.name}.partial")
    if is_database_url(db):
        from alexandria.store.postgresql.backup import to_sqlite

        if not out.parent.is_dir():
            raise Malformed(f"{out.parent}: no such directory", "NO_DIRECTORY",
                            path=str(out.parent))
        with open_readonly(db) as conn:
            _describe(conn, display(db))
        tmp.unlink(missing_ok=True)
        try:
            to_sqlite(str(db), tmp, display(db))
            _check_and_sync(tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, out)
        return describe(out)
    db = Path(db)
    source = _open_ro(db)
    try:
        _describe(source, db)
        _copy(source, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    os.replace(tmp, out)
    return describe(out)


def describe(path: str | Path) -> Snapshot:
    """The library a database or backup holds: its genesis pin, log size and bytes."""
    if is_database_url(path):
        with open_readonly(path) as conn:
            pin, size = _describe(conn, display(path))
            used = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return Snapshot(display(path), pin, size, int(used[0]))
    path = Path(path)
    conn = _open_ro(path)
    try:
        pin, size = _describe(conn, path)
    finally:
        conn.close()
    return Snapshot(str(path), pin, size, path.stat().st_size)


def restore(backup_path: str | Path, db: str | Path, replace: bool = False,
            floors: Sequence[Published] = ()) -> Snapshot:
    """Copy the backup at ``backup_path`` to ``db``.  An existing ``db`` is replaced only with
    ``replace``, only by a backup of the same library, and never while a server uses it
    (``store/db_lock.py``).  The largest checkpoint the replaced database had published (and
    ``floors``: ``LOG_KEY.published``) is carried over into the restored one, so that it takes
    no writes until caught up with it (``store/log_floor.py``); a backup that forks it is
    refused and nothing is changed."""
    backup_path = Path(backup_path)
    migrations.check_database(backup_path)  # a layout this version cannot serve: nothing replaced
    snapshot = describe(backup_path)
    if is_database_url(db):
        return _restore_postgresql(backup_path, snapshot, str(db), replace, floors)
    db = Path(db)
    if db.exists() and not replace:
        raise Malformed(
            f"{db} exists: stop the server and pass --replace to restore over it",
            "DATABASE_EXISTS", path=str(db),
        )
    with db_lock.exclusive(db, "restoring over it"):
        carried = list(floors)
        if db.exists():
            current = describe(db)
            if current.genesis_pin != snapshot.genesis_pin:
                raise Malformed(
                    f"{backup_path} is a backup of the library {snapshot.genesis_pin}, {db}"
                    f" belongs to {current.genesis_pin}", "GENESIS_MISMATCH",
                )
            with open_readonly(db) as conn:
                carried += log_floor.read_floor(conn)
        source = _open_ro(backup_path)
        tmp = db.with_name(f".{db.name}.restoring")
        try:
            _copy(source, tmp)
            if carried:
                _carry_floor(tmp, carried, backup_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            source.close()
        for suffix in ("-wal", "-shm"):  # the old database's log must not be replayed into it
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        os.replace(tmp, db)
    return describe(db)


def _carry_floor(target: Path, carried: list[Published], backup_path: Path) -> None:
    """Record the largest of ``carried`` in the copy ``target``, refusing a copy that forks
    any of them (``LOG_FORKED``)."""
    conn = sqlite3.connect(target, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        problem = log_floor.log_problem(conn, carried)
        if isinstance(problem, log_floor.LogForked):
            raise log_floor.LogForked(
                f"{backup_path} is not this library's history: its first"
                f" {problem.details['published_size']} leaves do not have the root of the"
                " checkpoint the library published; nothing was changed. Restore a backup"
                " of this history", **problem.details)
        top = log_floor.largest(carried)
        if top is not None:
            log_floor.raise_floor(conn, top.note)
        conn.execute("COMMIT")
    finally:
        conn.close()
    _check_and_sync(target)


def _restore_postgresql(backup_path: Path, snapshot: Snapshot, url: str,
                        replace: bool, floors: Sequence[Published]) -> Snapshot:
    """The backup copied into the PostgreSQL database ``url`` (``migrate`` with ``replace``:
    one transaction under the write lock, the copied log's root checked, refused while a node
    serves the database)."""
    from alexandria.store.postgresql.migrate import migrate

    if has_library(url):
        if not replace:
            raise Malformed(
                f"{display(url)} holds a library: stop its nodes and pass --replace to restore"
                " over it", "DATABASE_EXISTS", path=display(url),
            )
        current = describe(url)
        if current.genesis_pin != snapshot.genesis_pin:
            raise Malformed(
                f"{backup_path} is a backup of the library {snapshot.genesis_pin},"
                f" {display(url)} belongs to {current.genesis_pin}", "GENESIS_MISMATCH",
            )
    migrate(backup_path, url, replace=True, floors=floors, server_file=False)
    return describe(url)
