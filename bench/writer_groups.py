"""The group-commit writer alone, on either backend: wall and CPU time per admission.

```
.venv/bin/python -m bench.writer_groups [--postgresql] [--group 12] [--chunk 1] [--envelopes 4000]
    [--statements] [--words N] [--sizes]
```

Builds ``bench.admission``'s envelopes, prepares them in this process (``prepare``: not
measured), and admits them through a ``LedgerStorage`` in groups of ``--group`` at a time (as a
server's writer sees them under load: each group one write transaction), after 200 admitted to
warm the writer's memory.  Prints the writer thread's CPU per admission and the wall time per
admission, which adds what the writer waits for: SQLite's commit, or PostgreSQL's round trips,
its execution of the group's statements and its commit.  With ``--postgresql`` the library is
a throwaway durable cluster (fsync on; tests/support/pgcluster.py), and the CPU its own
processes spent on the measured admissions is printed too.  No HTTP, no other
process: the writer's share of ``bench.admission``'s figures, with far less noise.  With
``--chunk N`` the admissions are handed over N at a time, each chunk one job
(``LedgerStorage.submit_many``), as ``POST /api/entries/batch`` hands its lines over
(``--chunk 64 --group 1024``: a batch route's transaction under load).  With ``--statements``
(SQLite) the wall time of each SQL statement per admission is printed too, the most costly
first, and how many times an admission runs it: what of the writer's time is SQLite's own
(the timing itself adds about 20 µs of CPU per admission).  ``--words N``: texts of N words,
as ``bench.admission --words``.  ``--sizes``: afterwards, the database's bytes per head (a
``VACUUM`` first, so that only live rows count) and its four largest tables'.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from alexandria.rules.admission import prepare
from alexandria.service.bootstrap import found_library
from alexandria.store.backends import storage_for
from alexandria.store.postgresql import is_database_url
from alexandria.store.writer import Writer
from bench.admission import build
from bench.serving import process_cpu

WARM = 200


def _timed_writer(cpu: list[float]) -> None:
    """Count the writer thread's CPU in its transactions (``Writer._run_batch``)."""
    run_batch = Writer._run_batch

    def timed(self: Writer, conn: sqlite3.Connection, batch: list[Any]) -> list[Any]:
        started = time.thread_time()
        try:
            return run_batch(self, conn, batch)
        finally:
            cpu[0] += time.thread_time() - started

    Writer._run_batch = timed  # type: ignore[method-assign]


#: SQL text (its first 80 characters) → [runs (an ``executemany`` runs once a row), seconds],
#: with ``--statements``
STATEMENTS: collections.defaultdict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])


class _TimedConnection(sqlite3.Connection):
    """A connection that adds each statement's wall time to ``STATEMENTS``."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        started = time.perf_counter()
        try:
            return super().execute(sql, *args)
        finally:
            _count(sql, 1, started)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        rows = list(rows)
        started = time.perf_counter()
        try:
            return super().executemany(sql, rows)
        finally:
            _count(sql, len(rows), started)


def _count(sql: str, runs: int, started: float) -> None:
    entry = STATEMENTS[" ".join(sql.split())[:80]]
    entry[0] += runs
    entry[1] += time.perf_counter() - started


def _time_statements() -> None:
    """Every SQLite connection opened from now on a ``_TimedConnection``."""
    connect = sqlite3.connect

    def timed(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", _TimedConnection)
        conn: sqlite3.Connection = connect(*args, **kwargs)
        return conn

    sqlite3.connect = timed  # type: ignore[assignment]


async def measure(db: str, tmp: Path, envelopes: int, group: int, chunk: int = 1,
                  postmaster: int = 0, words: int = 0) -> tuple[float, float, float, int]:
    """(writer CPU, wall, CPU of PostgreSQL's processes when ``postmaster``) in seconds for the
    admissions after the warm-up, and their number."""
    _genesis, _key, bodies = build(envelopes, tmp, words)
    founding = found_library(seed=b"bench-admission", created_at="2026-01-01T00:00:00.000Z")
    storage = storage_for(db, founding.genesis)
    await storage.open()
    try:
        for doc in founding.authority_documents():
            await storage.admit_authority(doc)
        candidates = [prepare(b, founding.genesis, index_text=True) for b in bodies]
        for cand in candidates[:4]:  # the spaces, one at a time
            await storage.admit(cand)
        rest = candidates[4:]
        await asyncio.gather(*(storage.admit(c) for c in rest[:WARM]))
        cpu = [0.0]
        _timed_writer(cpu)
        STATEMENTS.clear()
        pg_before = process_cpu(postmaster) if postmaster else 0.0
        started = time.perf_counter()
        for i in range(WARM, len(rest), group):
            end = min(i + group, len(rest))
            if chunk == 1:
                await asyncio.gather(*(storage.admit(c) for c in rest[i:end]))
            else:
                await asyncio.gather(*(storage.submit_many(rest[j:min(j + chunk, end)])
                                       for j in range(i, end, chunk)))
        wall = time.perf_counter() - started
        pg_cpu = process_cpu(postmaster) - pg_before if postmaster else 0.0
        return cpu[0], wall, pg_cpu, len(rest) - WARM
    finally:
        await storage.close()


def sizes(db: str) -> tuple[int, int, list[tuple[str, int]]]:
    """(heads, the database's bytes, its four largest tables and their bytes, indexes
    included), after a ``VACUUM``."""
    if is_database_url(db):
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            pg.execute("VACUUM")
            heads = pg.execute("SELECT count(*) FROM catalogue").fetchone()
            size = pg.execute("SELECT pg_database_size(current_database())").fetchone()
            tables = pg.execute(
                "SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relkind = 'r'"
                " AND relnamespace = 'public'::regnamespace ORDER BY 2 DESC LIMIT 4").fetchall()
        assert heads is not None and size is not None
        return int(heads[0]), int(size[0]), [(str(t), int(b)) for t, b in tables]
    conn = sqlite3.connect(db)
    try:
        conn.execute("VACUUM")
        heads = conn.execute("SELECT count(*) FROM catalogue").fetchone()
        # each B-tree's pages under its table's name (an FTS5 table's are its shadow
        # tables', catalogue_text_data, …)
        tables = conn.execute(
            "SELECT t.tbl_name, sum(d.pgsize) FROM dbstat d JOIN sqlite_schema t"
            " ON t.name = d.name GROUP BY 1 ORDER BY 2 DESC LIMIT 4").fetchall()
    finally:
        conn.close()
    return int(heads[0]), Path(db).stat().st_size, [(str(t), int(b)) for t, b in tables]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--envelopes", type=int, default=4000)
    ap.add_argument("--group", type=int, default=12, help="admissions per write transaction")
    ap.add_argument("--chunk", type=int, default=1,
                    help="admissions a job (as the batch route hands its lines over)")
    ap.add_argument("--statements", action="store_true",
                    help="SQLite: also each SQL statement's wall time per admission")
    ap.add_argument("--words", type=int, default=0, metavar="N",
                    help="texts of N words (bench.admission --words)")
    ap.add_argument("--sizes", action="store_true",
                    help="afterwards, the database's bytes per head and its largest tables'")
    ap.add_argument("--postgresql", action="store_true",
                    help="a throwaway durable PostgreSQL cluster instead of a SQLite file")
    args = ap.parse_args()
    if args.statements:
        if args.postgresql:
            ap.error("--statements times SQLite's statements only")
        _time_statements()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        db = str(tmp / "library.db")
        postmaster = 0
        if args.postgresql:
            from tests.support.pgcluster import cluster

            pg = stack.enter_context(cluster(durable=True))
            db = pg.database("bench")
            postmaster = pg.postmaster
        cpu, wall, pg_cpu, n = asyncio.run(
            measure(db, tmp, args.envelopes, args.group, args.chunk, postmaster, args.words))
        stored = sizes(db) if args.sizes else None
    print(f"storage        {'PostgreSQL' if args.postgresql else 'SQLite'},"
          f" groups of {args.group}"
          f"{f' in jobs of {args.chunk}' if args.chunk > 1 else ''}, {n} admissions"
          f"{f', texts of {args.words} words' if args.words else ''}")
    print(f"writer CPU     {cpu / n * 1e6:6.0f} µs per admission")
    print(f"wall           {wall / n * 1e6:6.0f} µs per admission ({n / wall:,.0f}/s)")
    if postmaster:
        print(f"PostgreSQL CPU {pg_cpu / n * 1e6:6.0f} µs per admission (its processes)")
    if stored is not None:
        heads, size, tables = stored
        print(f"database       {size / heads / 1024:6.1f} KiB per head ({heads} heads); "
              + ", ".join(f"{t} {b / heads / 1024:.1f}" for t, b in tables))
    if args.statements:
        total = sum(seconds for _rows, seconds in STATEMENTS.values())
        print(f"SQL statements {total / n * 1e6:6.0f} µs per admission (wall), of which:")
        for sql, (rows, seconds) in sorted(STATEMENTS.items(), key=lambda kv: -kv[1][1]):
            if seconds / n * 1e6 >= 0.5:
                print(f"  {seconds / n * 1e6:6.1f} µs {rows / n:5.2f}×  {sql}")


if __name__ == "__main__":
    main()
