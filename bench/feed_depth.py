"""Write amplification by depth: what one admission writes at the bottom of a chain
of replies, at depths 10, 1,000 and more, and what the feeds of a deep and a shallow root cost
to read.

    .venv/bin/python -m bench.feed_depth [--depths 10,100,1000,10000] [--fanout 1000]

A fresh library on disk (``LedgerStorage``, the server's own write path: ``prepare`` then the
writer), one discussion and a chain of replies, each replying to the one before.  At each depth
asked for, the next reply's admission is measured alone (its time: the median of ``--samples``
admissions from that depth): the rows it added to ``feed`` (one per
*near* ancestor, ``store/feed.py``: at most ``feed.NEAR`` for a reply), what they take on disk
(at the ``feed`` table's bytes per row, from ``dbstat``), the bytes of its
``objects.ancestors`` column, the ``deep`` marks it added, and the ``feed`` rows of the whole
chain so far.

Then the reads: every page (``limit=50``) of ``/api/changes`` for the chain's discussion (a
*deep* root once the chain passes ``feed.NEAR``) and for a shallow discussion with
``--fanout`` direct replies (a normal root), in process (``changes.read_changes`` on the
storage's reader, no HTTP): per-page p50/p95 and the full sync; and for both, the discussion
route's read (its exact total reads the whole conversation) and the object's ``section=all``
first page, median of five.  A library without the ``deep`` table counts its marks as 0, so
the file measures a layout whose chain rows grow with depth (one per ancestor) as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.reads import objects
from alexandria.reads.changes import read_changes
from alexandria.rules.admission import prepare
from alexandria.service.bootstrap import found_library
from alexandria.store import feed
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.sqlite import sqlite_storage


def _feed(db: Path) -> tuple[int, int, int]:
    """Feed rows (both tables), the bytes of their pages (``dbstat``), rows of ``deep`` (0 when
    the layout has none)."""
    with sqlite3.connect(db) as conn:
        rows = int(conn.execute(f"SELECT count(*) FROM {feed.ROWS} AS f").fetchone()[0])
        size = conn.execute("SELECT sum(pgsize) FROM dbstat"
                            " WHERE name IN ('feed', 'feed_recent')").fetchone()[0]
        try:
            deep = int(conn.execute("SELECT count(*) FROM deep").fetchone()[0])
        except sqlite3.OperationalError:
            deep = 0
        return rows, int(size or 0), deep


async def _sync(storage: LedgerStorage, root: str) -> tuple[int, list[float], float]:
    """Every page of ``root``'s feed: items, per-page milliseconds, seconds in all."""
    cursor: str | None = None
    items = 0
    pages: list[float] = []
    t0 = time.perf_counter()
    while True:
        def page(conn: Any, after: str | None = cursor) -> bytes:
            return read_changes(conn, storage, root, after, 50)

        t = time.perf_counter()
        body = json.loads(await storage.read(page))
        pages.append((time.perf_counter() - t) * 1000)
        items += len(body["items"])
        cursor = body["cursor"]
        if not body["has_more"]:
            return items, pages, time.perf_counter() - t0


async def measure(depths: list[int], fanout: int, samples: int, tmp: Path
                  ) -> tuple[list[tuple[int, int, int, int, int, int, float]],
                             list[tuple[str, int, list[float], float]]]:
    f = found_library(seed=b"bench-feed-depth", created_at="2026-01-01T00:00:00.000Z")
    p = f.enroll("replier")
    db = tmp / "library.db"
    storage = sqlite_storage(db, f.genesis)
    await storage.open()
    out: list[tuple[int, int, int, int, int, int, float]] = []
    reads: list[tuple[str, int, list[float], float]] = []
    try:
        for doc in f.authority_documents():
            await storage.admit_authority(doc)
        base = now_ms() - 3_600_000
        clock = iter(range(base, base + 10**9))

        async def admit(content: dict[str, object]) -> str:
            env = p.envelope(f.genesis, content, format_ms(next(clock)))
            await storage.admit(prepare(json.dumps(env).encode(), f.genesis, index_text=True))
            return sha256_hex(canonical(env["record"]))

        top = parent = await admit({"kind": "discussion", "title": "Deep", "links": [],
                                    "body": {"text": "How deep can a thread go?"},
                                    "previous": ""})
        depth = 0
        for target in sorted(depths):
            while depth < target - 1:
                parent = await admit({"kind": "reply", "title": "Reply", "body": "and so on",
                                      "links": [{"relation": "replies_to", "target": parent}],
                                      "previous": ""})
                depth += 1
            rows_before, _, deep_before = _feed(db)
            t0 = time.perf_counter()
            parent = await admit({"kind": "reply", "title": "Reply", "body": "measured",
                                  "links": [{"relation": "replies_to", "target": parent}],
                                  "previous": ""})
            took = time.perf_counter() - t0
            depth += 1
            measured_at = depth
            rows_after, bytes_after, deep_after = _feed(db)
            with sqlite3.connect(db) as conn:
                listed = int(conn.execute("SELECT length(ancestors) FROM objects WHERE root = ?",
                                          (parent,)).fetchone()[0])
            added = rows_after - rows_before
            times = [took]
            for _ in range(samples - 1):  # the time of one admission is noisy: a median
                t0 = time.perf_counter()
                parent = await admit({"kind": "reply", "title": "Reply", "body": "timed",
                                      "links": [{"relation": "replies_to", "target": parent}],
                                      "previous": ""})
                times.append(time.perf_counter() - t0)
                depth += 1
            # pages grow in steps: the admission's share is its rows at the table's bytes/row
            out.append((measured_at, added, round(added * bytes_after / max(rows_after, 1)),
                        listed, deep_after - deep_before, rows_after, statistics.median(times)))
        wide = await admit({"kind": "discussion", "title": "Wide", "links": [],
                            "body": {"text": "Many answers, one level"}, "previous": ""})
        for _ in range(fanout):
            await admit({"kind": "reply", "title": "Reply", "body": "one of many",
                         "links": [{"relation": "replies_to", "target": wide}],
                         "previous": ""})
        for name, root in (("deep chain's discussion", top), ("wide discussion", wide)):
            await _sync(storage, root)  # warm
            items, pages, seconds = await _sync(storage, root)
            reads.append((name, items, pages, seconds))
            for what, read in (
                ("discussion (items + exact total)",
                 lambda conn, r=root: objects.discussion(conn, storage, r, "old", 0)),
                ("object section=all (first page)",
                 lambda conn, r=root: objects.object_view(conn, storage, r, "all", 0, False)),
            ):
                times = []
                for _ in range(5):
                    t = time.perf_counter()
                    await storage.read(read)
                    times.append((time.perf_counter() - t) * 1000)
                reads.append((f"{name}: {what}", 0, times, 0.0))
    finally:
        await storage.close()
    return out, reads


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.feed_depth",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--depths", default="10,100,1000,10000",
                    help="comma-separated reply depths to measure")
    ap.add_argument("--samples", type=int, default=21,
                    help="admissions timed from each depth (their median is printed)")
    ap.add_argument("--fanout", type=int, default=1000,
                    help="direct replies of the shallow discussion whose feed is read")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    with tempfile.TemporaryDirectory() as d:
        rows, reads = asyncio.run(measure(depths, args.fanout, args.samples, Path(d)))
    print(f"{'depth':>7} {'feed rows':>10} {'feed bytes':>11} {'ancestors':>10} {'deep':>5}"
          f" {'chain rows':>11} {'admit ms':>9}")
    for depth, added, grew, listed, deep, total, took in rows:
        print(f"{depth:>7} {added:>10} {grew:>11} {listed:>10} {deep:>5} {total:>11}"
              f" {took * 1000:>9.1f}")
    print("feed bytes: the admission's rows at the feed table's bytes per row (dbstat);"
          " ancestors: bytes of the new object's objects.ancestors column; deep: marks added;"
          f" admit ms: median of {args.samples} admissions from that depth (synchronous=FULL)")
    for name, items, pages, seconds in reads:
        if not items:
            print(f"{name}: median {statistics.median(pages):.2f} ms of {len(pages)}")
            continue
        q = statistics.quantiles(pages, n=20) if len(pages) > 1 else pages * 19
        print(f"changes of the {name}: {items} items in {len(pages)} pages, {seconds:.2f} s;"
              f" page p50 {statistics.median(pages):.2f} ms, p95 {q[18]:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
