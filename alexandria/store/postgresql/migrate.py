"""``alexandria migrate``: a SQLite library copied into an empty PostgreSQL database.

1. the SQLite file must be a library of this leaf format and of a layout this version knows
   (``store/migrations.py``): one of an earlier schema version is first brought to this one,
   as opening it would, under the lock that keeps a server away; then it is opened read-only;
2. the PostgreSQL schema is applied and the database must hold no log yet (``restore`` into
   PostgreSQL passes ``replace``: a log of the same library is replaced), nor another
   library's genesis;
3. in one PostgreSQL transaction, under the write lock (no node admits meanwhile), the tables
   copied are emptied (a node may have recorded the genesis already), then every table
   of the ledger and of the library's own state is copied row by row (``COPIED``: the log, its
   Merkle nodes, the projections the rules read, checkpoints and their cosignatures, personal
   lists, enrolment requests and ``meta`` — the genesis, the changes cursor secret and epoch,
   so cursors issued before the move stay valid); the catalogue's indexes, which differ
   between the backends, are rebuilt from the copied revisions (``search_index.rebuild``);
4. in the same transaction, before it commits, the Merkle root of every leaf now in
   PostgreSQL, recomputed from the leaves themselves (streamed: ``merkle_nodes.log_root``),
   must equal the SQLite log's root of the same size, and the latest checkpoint must be the
   same: a copy that differs (a damaged file, a tampered leaf) is rolled back, and the
   database keeps what it held — on ``restore --replace``, the log it replaced; after the
   commit, ``VACUUM (ANALYZE)`` gives the planner the new tables' statistics and marks their
   pages all-visible (index-only scans read no table page).

The SQLite file is read in one snapshot (one read transaction, as ``backup`` does), and
``migrate`` refuses while a server uses either database (``store/db_lock.py``): what a SQLite
server admitted after the snapshot would not be copied, and a PostgreSQL node would write
beside the copy.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psycopg

from alexandria.core import merkle
from alexandria.errors import Failed, Malformed
from alexandria.store import db_lock, log_floor, migrations, search_index
from alexandria.store.log_floor import Published
from alexandria.store.merkle_nodes import LEAVES, log_root, node_reader, tree_size
from alexandria.store.postgresql import connection, schema
from alexandria.store.postgresql.connection import Dialect, PgConnection
from alexandria.store.postgresql.storage import redacted
from alexandria.store.schema import fill_derived_table

#: tables copied as they are, in this order (the catalogue's are rebuilt instead)
COPIED = (
    "meta", "log", "merkle_nodes", "revisions", "objects", "links", "votes", "authorities",
    "revocations", "feed", "deep", "checkpoints", "checkpoint_cosignatures", "personal_state",
    "personal_requests", "enrolment_requests",
)
#: tables derived from the copied ones, filled in the copy from them (``schema.fill_derived_table``)
DERIVED = ("tree_heads",)
#: ``meta`` keys that describe the SQLite copy, not the library
NOT_COPIED_META = ("catalogue_index",)
BATCH = 2000


@dataclass(frozen=True)
class Migrated:
    size: int
    root: str
    rows: int
    checkpoint: int

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "root": self.root, "rows": self.rows,
                "checkpoint": self.checkpoint}


class MigrationFailed(Failed):
    default_code = "MIGRATION_FAILED"


#: ``progress(table, rows copied so far, rows to copy)``, over all the tables, after each batch
Progress = Callable[[str, int, int], None]


def _columns(lite: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in lite.execute(f"PRAGMA table_info({table})")]


def _select(lite: sqlite3.Connection, table: str) -> tuple[list[str], str, tuple[str, ...]]:
    """``(columns, SELECT, its parameters)`` of the rows a copy of ``table`` writes; no
    columns for a table this library does not have."""
    cols = _columns(lite, table)
    if not cols:
        return [], "", ()
    where = (" WHERE key NOT IN (" + ",".join("?" * len(NOT_COPIED_META)) + ")"
             if table == "meta" else "")
    select = f"SELECT {', '.join(cols)} FROM {table}{where}"
    if table == "feed":
        # the rows SQLite had not yet moved from feed_recent (store/feed.py) go to feed, which
        # PostgreSQL writes directly
        select += " UNION ALL SELECT owner, sequence FROM feed_recent"
    return cols, select, NOT_COPIED_META if where else ()


def _count(lite: sqlite3.Connection, table: str) -> int:
    _cols, select, params = _select(lite, table)
    return int(lite.execute(f"SELECT count(*) FROM ({select})", params).fetchone()[0]) \
        if select else 0


def _copy(lite: sqlite3.Connection, raw: psycopg.Connection[Any], table: str,
          progress: Callable[[int], None]) -> int:
    """The rows of ``table``, ``progress(rows copied so far)`` after each batch of them."""
    cols, select, params = _select(lite, table)
    if not cols:
        return 0
    rows = lite.execute(select, params)
    count = 0
    with raw.cursor().copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
        while True:
            chunk = rows.fetchmany(BATCH)
            if not chunk:
                break
            for row in chunk:
                copy.write_row(row)
            count += len(chunk)
            progress(count)
    return count


def _check_copy(raw: psycopg.Connection[Any], conn: PgConnection, size: int, root: bytes,
                latest: int) -> None:
    """Step 4, inside the copy's transaction: raising rolls the copy back."""
    with raw.cursor() as cur:  # streamed: one row at a time, never the whole log in memory
        copied_size, copied = log_root(cur.stream(LEAVES))
    if copied_size != size:
        raise MigrationFailed(f"PostgreSQL holds {copied_size} leaves, SQLite {size}",
                              size=size)
    if copied != root:
        raise MigrationFailed(
            f"the migrated log's root {copied.hex()} is not the SQLite log's"
            f" {root.hex()} (size {size})", size=size)
    found = conn.execute("SELECT coalesce(max(size), 0) FROM checkpoints").fetchone()
    if int(found[0]) != latest:
        raise MigrationFailed(f"latest checkpoint {found[0]}, SQLite's {latest}")


def _target_pin(conn: PgConnection) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'genesis_pin'").fetchone()
    return None if row is None else str(row[0])


def migrate(source: str | Path, url: str,
            progress: Progress = lambda table, rows, total: None,
            replace: bool = False, floors: Sequence[Published] = (),
            server_file: bool = True) -> Migrated:
    """Steps 1–4 of the module docstring.  ``replace``: the target may hold a log of the same
    library, which the copy replaces (``alexandria restore --replace`` of a backup, which is a
    SQLite library file: ``store/postgresql/backup.py``); the largest checkpoint the replaced
    database had published (and ``floors``: ``LOG_KEY.published``) is carried over, and a copy
    that forks it is refused.  ``server_file``: ``source`` is a database a server may be using
    (``migrate``), not a backup (``restore``): it is locked against one."""
    path = Path(source)
    if not path.exists():
        raise Malformed(f"{source}: no such database", "NO_DATABASE")
    version = migrations.check_database(path)  # 1.
    if version == 0:
        raise Malformed(f"{source} is not an Alexandria database: it has no tables",
                        "NOT_A_LIBRARY")
    with contextlib.ExitStack() as stack:
        if server_file:
            stack.enter_context(db_lock.exclusive(path, "migrating it"))
        if version != migrations.MIGRATIONS[-1][0]:
            _bring_to_current(path, version, server_file)
        lite = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True,
                               isolation_level=None)
        stack.callback(lite.close)
        lite.execute("BEGIN")  # one snapshot for every table, as a backup is
        return _migrate(lite, source, url, progress, replace, floors)
    raise AssertionError("unreachable")


def _bring_to_current(path: Path, version: int, server_file: bool) -> None:
    """Step 1 for a library of an earlier schema version (or of the baseline's layout with no
    version recorded): the migrations opening it would apply, under the lock already held.  A
    backup is not changed: it is restored into a SQLite file first, which opening brings to
    this version."""
    known = migrations.MIGRATIONS[-1][0]
    if not server_file:
        raise migrations.SchemaTooOld(
            f"{path} is a library of schema version {version}; this Alexandria's is {known}:"
            f" restore it into a SQLite file (`alexandria restore {path} --db FILE`), serve that"
            " once with this version, which migrates it, and migrate that file",
            found=version, known=known, path=str(path))
    lite = sqlite3.connect(path, isolation_level=None)
    try:
        lite.execute("PRAGMA busy_timeout = 30000")
        migrations.apply(lite, path)
    finally:
        lite.close()


def _migrate(lite: sqlite3.Connection, source: str | Path, url: str,
             progress: Progress, replace: bool,
             floors: Sequence[Published]) -> Migrated:
    size = tree_size(lite)
    pin = lite.execute("SELECT value FROM meta WHERE key = 'genesis_pin'").fetchone()
    if pin is None:
        raise Malformed(f"{source} is not an Alexandria database", "NOT_A_LIBRARY")
    root = merkle.root_hash(size, node_reader(lite))
    latest = lite.execute("SELECT max(size) FROM checkpoints").fetchone()[0] or 0
    try:
        raw = connection.connect(url)
    except psycopg.Error as exc:
        raise Failed(f"cannot connect to the PostgreSQL database: {exc}".strip(),
                     "STORAGE_UNAVAILABLE") from exc
    with raw:
        # no node may serve the database meanwhile: it holds the lock's shared side
        db_lock.pg_exclusive(raw, redacted(url),
                             "restoring over it" if replace else "migrating into it")
        schema.apply(raw)  # 2.
        conn = PgConnection(raw, Dialect())
        rows = 0
        with raw.transaction():  # 3.
            conn.execute(
                "UPDATE ledger_writes SET version = version + 1 WHERE id = 1")
            if (not replace
                    and conn.execute("SELECT 1 FROM log LIMIT 1").fetchone() is not None):
                raise Malformed("the PostgreSQL database already holds a log: migrate"
                                " into an empty database", "TARGET_NOT_EMPTY")
            found_pin = _target_pin(conn)
            if found_pin is not None and found_pin != pin[0]:
                raise Malformed(
                    f"the PostgreSQL database belongs to the library {found_pin}, {source}"
                    f" to {pin[0]}", "GENESIS_MISMATCH")
            pg = cast(sqlite3.Connection, conn)
            carried = [*log_floor.read_floor(pg), *floors] if replace else []
            raw.execute(f"TRUNCATE {', '.join((*COPIED, *DERIVED))}")
            total = sum(_count(lite, t) for t in COPIED)
            for table in COPIED:
                done = rows

                def copied(n: int, table: str = table, done: int = done) -> None:
                    progress(table, done + n, total)

                rows += _copy(lite, raw, table, copied)
            # the connection protocol is sqlite3's subset (store/postgresql/__init__.py)
            fill_derived_table(pg, "tree_heads")
            with conn.pipelined():  # the replay's writes without a round trip each
                search_index.rebuild(pg)
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('catalogue_index', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (search_index.INDEX_VERSION,),
            )
            _check_copy(raw, conn, size, root, latest)  # 4.
            if carried:
                _carry_floor(pg, carried, size)
        # the planner's statistics of the tables just filled, and their visibility map:
        # without it every index-only read (the covering indexes) visits the table too until
        # autovacuum comes by
        raw.execute("VACUUM (ANALYZE)")
    return Migrated(size, root.hex(), rows, int(latest))


def _carry_floor(conn: sqlite3.Connection, carried: list[Published], size: int) -> None:
    """The largest checkpoint the replaced database had published stays known (a restored
    log that lacks part of it takes no writes until caught up); a copy that forks it is
    refused, rolling the restore back."""
    problem = log_floor.log_problem(conn, carried, size)
    if isinstance(problem, log_floor.LogForked):
        raise log_floor.LogForked(
            "the backup is not this library's history: its first"
            f" {problem.details['published_size']} leaves do not have the root of the"
            " checkpoint the database it would replace had published; nothing was changed."
            " Restore a backup of this history", **problem.details)
    top = log_floor.largest(carried)
    if top is not None:
        log_floor.raise_floor(conn, top.note)
