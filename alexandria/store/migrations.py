"""The SQLite layout's numbered versions, recorded in ``PRAGMA user_version``: the shape of
PostgreSQL's (``store/postgresql/schema.py``).

``MIGRATIONS`` lists the versions in order; version 1, the baseline, is ``schema.TABLES``.
Opening a library (``SqliteBackend.connect_writer``) applies, in one ``BEGIN IMMEDIATE``
transaction (a process opening the file at the same time waits, then finds it current), every
version the
file has not recorded, and records the last; a crash leaves the file at its earlier version,
whole.  A file of a newer version than this code knows is refused (``SCHEMA_TOO_NEW``, as on
PostgreSQL: an older Alexandria must not write to a newer layout).

A file that records no version (``user_version`` 0) and holds tables was written before
versions were recorded.  It is adopted as version 1 when its tables and indexes are the
baseline's (compared as SQLite keeps their statements, whatever the spaces, comments and quotes
of the text that created them); otherwise it is of an earlier layout, which no step converts —
there were no deployments to carry over — and it is refused (``SCHEMA_TOO_OLD``) with the way
out: its log, whose leaves have this format, exported and replayed into a new library.
"""

from __future__ import annotations

import functools
import logging
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from alexandria.errors import Failed
from alexandria.store.schema import LINKS_RELATED_COMPARED, TABLES, check_leaf_format

log = logging.getLogger(__name__)

Steps = tuple[tuple[int, str], ...]

#: (version, SQL) in order; a later layout appends its own step, never edits an applied one
MIGRATIONS: Steps = (
    (1, TABLES),
    (2, LINKS_RELATED_COMPARED),
)
VERSION = MIGRATIONS[-1][0]

#: names a difference lists at most (``SchemaTooOld``'s details)
_LISTED = 20


class SchemaTooNew(Failed):
    """The database was migrated by a newer version of Alexandria."""

    default_code = "SCHEMA_TOO_NEW"


class SchemaTooOld(Failed):
    """The database's layout is older than the operation takes: one from before versions were
    recorded, which no migration converts, or (a backup ``restore`` copies into PostgreSQL,
    which it never changes) an earlier version."""

    default_code = "SCHEMA_TOO_OLD"


def user_version(conn: sqlite3.Connection) -> int:
    """The version the database records (0: none)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_SPACE = re.compile(r"\s+")
_AROUND = re.compile(r" ?([(),=]) ?")


def _normal(sql: str) -> str:
    """``sql`` without comments, quotes around names and spaces that change nothing: the
    statement SQLite keeps for a table rebuilt and renamed, or given a column by ``ALTER
    TABLE``, reads as the one that creates it afresh."""
    sql = _SPACE.sub(" ", _COMMENT.sub(" ", sql).replace('"', ""))
    return _AROUND.sub(r"\1", sql).strip()


def layout(conn: sqlite3.Connection) -> dict[str, str]:
    """The database's tables, indexes, views and triggers by name, each its normalised
    statement; neither SQLite's own tables nor the shadow tables of virtual tables (FTS5's
    ``…_data``, ``…_idx``: their module's, not ours)."""
    shadow = {str(r[1]) for r in conn.execute("PRAGMA table_list")
              if r[0] == "main" and r[2] == "shadow"}
    return {str(name): _normal(str(sql)) for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"
        " AND substr(name, 1, 7) != 'sqlite_'") if name not in shadow}


@functools.cache
def _layout_of(script: str) -> dict[str, str]:
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(script)
        return layout(conn)
    finally:
        conn.close()


def statements(script: str) -> Iterator[str]:
    """The statements of ``script`` one by one, cut where SQLite's tokenizer says one is
    complete (a ``;`` inside a literal or a comment cuts nothing).  ``executescript`` would
    commit the transaction a migration runs in first."""
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if _COMMENT.sub("", pending).strip(" \t\r\n;"):
                yield pending
            pending = ""


def _refuse_newer(conn: sqlite3.Connection, path: str | Path, known: int) -> int:
    found = user_version(conn)
    if found > known:
        raise SchemaTooNew(
            f"{path}'s schema is version {found}; this Alexandria knows up to {known}: upgrade"
            " Alexandria to serve it", current=found, known=known, path=str(path))
    return found


def version_of(conn: sqlite3.Connection, path: str | Path,
               steps: Steps | None = None) -> int:
    """The version of the database open on ``conn``, named ``path`` in messages: 0 for one
    with no tables yet, the baseline's for one that records none but has its layout.  A newer
    version than ``steps`` knows is refused (``SchemaTooNew``), so is a database of an earlier
    layout (``SchemaTooOld``) or no library at all (``NOT_A_LIBRARY``)."""
    steps = MIGRATIONS if steps is None else steps
    found = _refuse_newer(conn, path, steps[-1][0])
    if found:
        return found
    have = layout(conn)
    if not have:
        return 0
    if not {"meta", "log"} <= have.keys():
        raise Failed(f"{path} is not an Alexandria database: it has other tables",
                     "NOT_A_LIBRARY", path=str(path))
    baseline, script = steps[0]
    want = _layout_of(script)
    if have == want:
        return baseline
    missing = sorted(want.keys() - have.keys())
    unexpected = sorted(have.keys() - want.keys())
    changed = sorted(name for name in want.keys() & have.keys() if want[name] != have[name])
    differences = "; ".join(f"{what}: {', '.join(names[:_LISTED])}" for what, names in (
        ("missing", missing), ("not in this layout", unexpected), ("declared otherwise", changed),
    ) if names)
    raise SchemaTooOld(
        f"{path} has tables of an earlier layout ({differences}) and records no schema"
        f" version; this version of Alexandria neither converts nor serves it. Carry its log"
        f" into a new library: `alexandria export --db {path} --output LOG.jsonl`, create the"
        " new library (`alexandria serve --genesis GENESIS --db NEW_FILE`, stopped once it"
        " serves), then `alexandria restore --db NEW_FILE --catch-up LOG.jsonl` (docs/"
        "operations.md, \"Schema versions\"); personal lists and enrolment requests are not in"
        " the log", missing=missing[:_LISTED], unexpected=unexpected[:_LISTED],
        changed=changed[:_LISTED], known=steps[-1][0], path=str(path),
    )


def apply(conn: sqlite3.Connection, path: str | Path, steps: Steps | None = None) -> list[int]:
    """Bring the database open on ``conn`` (autocommit: ``isolation_level=None``) to the last
    version of ``steps``, in one transaction; the versions whose statements ran now (none when
    current, or when a database of the baseline's layout is only given its number)."""
    steps = MIGRATIONS if steps is None else steps
    known = steps[-1][0]
    if _refuse_newer(conn, path, known) == known:
        return []
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = version_of(conn, path, steps)
        applied = [version for version, _script in steps if version > current]
        for version, script in steps:
            if version > current:
                for statement in statements(script):
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {int(known)}")
    except BaseException:
        if conn.in_transaction:  # some failures (a full disk) end the transaction themselves
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    if current and applied:
        log.info("%s: schema migrated from version %d to %d", path, current, known)
    return applied


def check_database(path: str | Path) -> int:
    """The schema version of the SQLite library at ``path`` (0: no such file, or no tables
    yet), read without writing: a database of a newer version, of an earlier layout or of an
    earlier leaf format, or no library at all, is refused before anything serves, copies or
    writes it (``serve``, ``migrate`` and the storage call this first, so the operator reads
    one clear line)."""
    if not Path(path).exists():
        return 0
    conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        _refuse_newer(conn, path, MIGRATIONS[-1][0])
        names = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'log')")}
        if names == {"meta", "log"}:  # the leaf format first: a log of another cannot be kept
            check_leaf_format(conn, path)
        return version_of(conn, path)
    except sqlite3.DatabaseError as exc:
        raise Failed(f"{path} is not an Alexandria database: {exc}",
                     "NOT_A_LIBRARY", path=str(path)) from exc
    finally:
        conn.close()
