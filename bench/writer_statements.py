"""Where the writer's time goes, statement by statement, in a steady bulk load.

```
.venv/bin/python -m bench.writer_statements --from /tmp/lib1m --dir /tmp/x [--extend 24000]
```

Copies a ``bench.loader`` library a page at a time (as ``bench.loader --extend --from``),
admits ``--extend`` more entries of the loader's mix in batches of ``--batch``, and times every
statement the writer's connection runs after the first ``--skip`` batches (the cold start):
total seconds, calls and microseconds per call of each SQL text, ``COMMIT`` included (the WAL
frames of every page the batch dirtied, their checksums and the ``fsync``).  Run it on two
libraries of different sizes to see which statements grow with the library
(bench/results/journal.md, "Feed rows staged").  Each call pays a Python wrapper of about a
microsecond.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from alexandria.store.sqlite import SqliteBackend
from alexandria.store.writer import Writer
from bench import loader


class _Timed:
    """The writer's connection, every ``execute``/``executemany`` timed while ``on``."""

    def __init__(self, conn: sqlite3.Connection, stats: dict[str, list[float]]) -> None:
        self._conn = conn
        self._stats = stats
        self.on = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _timed(self, label: str, run: Callable[[], sqlite3.Cursor]) -> sqlite3.Cursor:
        if not self.on:
            return run()
        t0 = time.perf_counter()
        try:
            return run()
        finally:
            entry = self._stats[label]
            entry[0] += 1
            entry[1] += time.perf_counter() - t0

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self._timed(" ".join(sql.split()), lambda: self._conn.execute(sql, params))

    def executemany(self, sql: str, rows: Iterable[Any]) -> sqlite3.Cursor:
        return self._timed("MANY " + " ".join(sql.split()),
                           lambda: self._conn.executemany(sql, rows))


def measure(source: Path, directory: Path, more: int, batch: int, skip: int
            ) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Statement figures ``{sql: [calls, seconds]}`` and ``bench.loader.extend``'s summary."""
    stats: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    connect = SqliteBackend.connect_writer
    run_batch = Writer._run_batch
    batches = [0]

    def timed_connect(self: SqliteBackend) -> sqlite3.Connection:
        return _Timed(connect(self), stats)  # type: ignore[return-value]

    def counted_batch(self: Writer, conn: Any, jobs: Any) -> list[Any]:
        batches[0] += 1
        conn.on = batches[0] > skip
        try:
            return run_batch(self, conn, jobs)
        finally:
            conn.on = False

    SqliteBackend.connect_writer = timed_connect  # type: ignore[method-assign]
    Writer._run_batch = counted_batch  # type: ignore[method-assign,assignment]
    try:
        loader.copy_library(source, directory)
        summary = asyncio.run(loader.extend(directory, more, batch, 2, 512, False))
    finally:
        SqliteBackend.connect_writer = connect  # type: ignore[method-assign]
        Writer._run_batch = run_batch  # type: ignore[method-assign]
    return stats, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.writer_statements",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="source", required=True, type=Path,
                    help="a bench.loader library (not changed: it is copied)")
    ap.add_argument("--dir", required=True, type=Path, help="where the copy goes (must not exist)")
    ap.add_argument("--extend", type=int, default=24_000, help="entries to admit")
    ap.add_argument("--batch", type=int, default=2000, help="admissions per transaction")
    ap.add_argument("--skip", type=int, default=6, help="write transactions left untimed first")
    ap.add_argument("--top", type=int, default=30, help="statements to print")
    args = ap.parse_args(argv)
    stats, summary = measure(args.source, args.dir, args.extend, args.batch, args.skip)
    total = sum(seconds for _calls, seconds in stats.values())
    steady = summary["steady"]
    print(f"{summary['library_entries']:,} entries; steady {steady['per_second']:,.0f}/s,"
          f" writer {steady['writer_cpu_ms_per_entry']:.2f} ms CPU/entry;"
          f" statements {total:.2f} s in all")
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][1])
    for sql, (calls, seconds) in ranked[:args.top]:
        per_call = 1e6 * seconds / calls
        print(f"{seconds:8.3f} s {int(calls):8,} calls {per_call:9.1f} µs  {sql[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
