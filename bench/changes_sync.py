"""Following a root from scratch through ``GET /api/changes``, against a large library.

    .venv/bin/python -m bench.changes_sync --dir DIR [--dir DIR2 ...] [--runs 3]
        [--entries N --follow-members M]   # build DIR with bench.loader when it is missing
    [--members N]   # follow the root with nearest N member revisions, not loader.json's root

``DIR`` is what ``bench.loader`` writes (``library.db``, ``genesis.json``, ``loader.json`` with
the follow root).  For each library the benchmark starts a real server
(``alexandria serve``, uvicorn on 127.0.0.1, one process) and, from this process over one
keep-alive connection, pages through the follow root's feed with ``limit=50`` until
``has_more`` is false, ``--runs`` times.  It reports the per-page latency seen by the client
(request sent → body received; p50/p95/max), the full sync time (first request → last body
parsed, including the client's JSON parsing), the server's CPU per page, and the same pages read
in-process with ``changes.read_changes`` on a plain sqlite3 connection (no HTTP), to show what
the index range read costs by itself.  Every sync is checked: strictly ascending sequences, no
duplicates, and exactly as many items as the root has up to the snapshot (its own revisions and
its members' feed rows, counted straight from the tables).

Targets: page p95 <= 10 ms and full sync <= 2 s for 10,000 member revisions in a
library of 1,000,000 entries, and the same per-page cost at 100,000 and 1,000,000 entries.
The machine is shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import orjson

from alexandria.reads import changes
from alexandria.service.library import load_genesis
from alexandria.store import feed, schema
from alexandria.store.sqlite import sqlite_storage
from bench.serving import free_port, process_cpu, wait_ready


@dataclass
class Sync:
    pages: int
    items: int
    bytes: int
    seconds: float
    latencies_ms: list[float]
    server_cpu_s: float

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))]








def _members(conn: sqlite3.Connection, root: str, hi: int) -> tuple[int, int, int]:
    """Count, first and last sequence of the root's items up to ``hi``, read straight from the
    tables (not through the server's query): the feed rows of the members below the root, and
    the root's own revisions (a scan of ``revisions``)."""
    n, lo, top = conn.execute(
        f"SELECT count(*), min(sequence), max(sequence) FROM (SELECT sequence FROM {feed.ROWS}"
        f" WHERE owner = (SELECT sequence FROM revisions WHERE {schema.revision_id('?')})"
        " AND sequence <= ? UNION ALL SELECT sequence FROM revisions WHERE root = ?"
        " AND sequence <= ?)",
        (root, root, hi, root, hi),
    ).fetchone()
    return int(n), int(lo or 0), int(top or 0)


def feed_count(db: Path, root: str, hi: int) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return _members(conn, root, hi)[0]
    finally:
        conn.close()


def follow_http(port: int, root: str, server_pid: int) -> tuple[Sync, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    cursor: str | None = None
    latencies: list[float] = []
    seqs: list[int] = []
    total_bytes = 0
    cpu0 = process_cpu(server_pid)
    start = time.perf_counter()
    while True:
        params = {"root": root, "limit": "50"}
        if cursor is not None:
            params["cursor"] = cursor
        t = time.perf_counter()
        conn.request("GET", "/api/changes?" + urlencode(params))
        resp = conn.getresponse()
        body = resp.read()
        latencies.append((time.perf_counter() - t) * 1000)
        if resp.status != 200:
            raise RuntimeError(f"{resp.status}: {body[:300]!r}")
        page = orjson.loads(body)
        total_bytes += len(body)
        seqs += [it["admission"]["sequence"] for it in page["items"]]
        cursor = page["cursor"]
        if not page["has_more"]:
            break
    seconds = time.perf_counter() - start
    cpu = process_cpu(server_pid) - cpu0
    conn.close()
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        raise AssertionError("sequences are not strictly ascending")
    return Sync(len(latencies), len(seqs), total_bytes, seconds, latencies, cpu), page["snapshot"]


def follow_in_process(db: Path, genesis: Path, root: str) -> list[float]:
    """The same pages through ``changes.read_changes`` on a plain connection: no HTTP."""
    storage = sqlite_storage(db, load_genesis(genesis))  # only its record assembly is used
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
    cursor: str | None = None
    out: list[float] = []
    try:
        while True:
            t = time.perf_counter()
            body = changes.read_changes(conn, storage, root, cursor, 50)
            out.append((time.perf_counter() - t) * 1000)
            page = orjson.loads(body)
            cursor = page["cursor"]
            if not page["has_more"]:
                return out
    finally:
        conn.close()


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def ensure_library(directory: Path, entries: int | None, follow_members: int) -> None:
    if (directory / "loader.json").exists():
        return
    if entries is None:
        raise SystemExit(f"{directory} has no loader.json: pass --entries to build it")
    subprocess.run(
        [sys.executable, "-m", "bench.loader", "--dir", str(directory), "--entries", str(entries),
         "--follow-members", str(follow_members)],
        check=True,
    )


def pick_root(db: Path, members: int) -> str:
    """The root whose feed holds the number of member revisions nearest ``members``."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT (SELECT root FROM objects WHERE created_sequence = owner), count(*) AS n"
            f" FROM {feed.ROWS} GROUP BY owner ORDER BY abs(n - ?) LIMIT 1",
            (members,),
        ).fetchone()
        return str(row[0])
    finally:
        conn.close()


def describe(db: Path, root: str) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        size = conn.execute("SELECT max(sequence) FROM log").fetchone()[0]
        n, lo, hi = _members(conn, root, size)
        return (f"log size {size:,}; root {root[:12]}… has {n:,} member revisions at sequences"
                f" {lo:,}..{hi:,}")
    finally:
        conn.close()


def bench_library(directory: Path, runs: int, members: int | None,
                  served: str | None = None) -> dict[str, float]:
    meta = json.loads((directory / "loader.json").read_text())
    db, genesis = directory / "library.db", directory / "genesis.json"
    root = meta["follow_root"] if members is None else pick_root(db, members)
    print("  " + describe(db, root), flush=True)
    port = free_port()
    cmd = [sys.executable, "-m", "alexandria.cli", "serve", "--genesis", str(genesis),
           "--db", served or str(db), "--port", str(port), "--workers", "1"]
    if (directory / "log.key").exists():
        cmd += ["--log-key", str(directory / "log.key")]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        wait_ready(port, 900)  # the first start on a loader database may migrate it
        syncs = []
        for i in range(runs):
            sync, hi = follow_http(port, root, server.pid)
            expected = feed_count(db, root, hi)
            if sync.items != expected:
                raise AssertionError(f"{sync.items} items, the feed index holds {expected}")
            syncs.append(sync)
            print(
                f"  run {i + 1}: {sync.pages} pages, {sync.items} items, "
                f"{sync.bytes / 1e6:.1f} MB in {sync.seconds:.2f} s; page p50 "
                f"{sync.pct(0.5):.2f} ms, p95 {sync.pct(0.95):.2f} ms, max "
                f"{max(sync.latencies_ms):.2f} ms; server CPU "
                f"{sync.server_cpu_s / sync.pages * 1000:.2f} ms/page",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    in_proc = follow_in_process(db, genesis, root)
    print(f"  in-process read_changes (no HTTP): p50 {pct(in_proc, 0.5):.2f} ms, "
          f"p95 {pct(in_proc, 0.95):.2f} ms over {len(in_proc)} pages", flush=True)
    best = min(syncs[1:] or syncs, key=lambda s: s.seconds)
    latencies = [x for s in syncs for x in s.latencies_ms]
    return {
        "log_size": float(hi), "members": float(syncs[0].items),
        "first_sync_s": syncs[0].seconds, "best_sync_s": best.seconds,
        "p50_ms": pct(latencies, 0.5), "p95_ms": pct(latencies, 0.95),
        "cpu_ms_per_page": statistics.median(s.server_cpu_s / s.pages for s in syncs) * 1000,
        "in_process_p50_ms": pct(in_proc, 0.5), "in_process_p95_ms": pct(in_proc, 0.95),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", action="append", required=True, type=Path,
                    help="a bench.loader directory; repeat to compare library sizes")
    ap.add_argument("--runs", type=int, default=3, help="full syncs per library")
    ap.add_argument("--entries", type=int, help="build a missing --dir with this many entries")
    ap.add_argument("--follow-members", type=int, default=10_000)
    ap.add_argument("--members", type=int,
                    help="follow the root whose feed size is nearest this, instead of the"
                    " loader's follow root")
    ap.add_argument("--db", metavar="URL", help="serve this database instead of"
                    " DIR/library.db: its PostgreSQL copy (alexandria migrate); one --dir")
    args = ap.parse_args()
    results = {}
    for d in args.dir:
        ensure_library(d, args.entries, args.follow_members)
        print(f"{d}:", flush=True)
        results[d] = bench_library(d, args.runs, args.members, args.db)
    print()
    print(f"{'library':>28} {'entries':>9} {'members':>8} {'p50 ms':>7} {'p95 ms':>7} "
          f"{'sync s':>7} {'CPU ms/page':>11} {'in-proc p50':>11}")
    for d, r in results.items():
        print(f"{str(d)[-28:]:>28} {int(r['log_size']):>9} {int(r['members']):>8} "
              f"{r['p50_ms']:>7.2f} {r['p95_ms']:>7.2f} {r['best_sync_s']:>7.2f} "
              f"{r['cpu_ms_per_page']:>11.2f} {r['in_process_p50_ms']:>11.2f}")
    print("targets: p95 <= 10 ms, full sync <= 2 s at 1,000,000 entries; per-page cost flat")


if __name__ == "__main__":
    main()
