"""Write amplification by depth (issue 21): what one admission writes at the bottom of a chain
of replies, at depths 10, 1,000 and more.

    .venv/bin/python -m bench.feed_depth [--depths 10,100,1000,2000]

A fresh library on disk (``SqliteStorage``, the server's own write path: ``prepare`` then the
writer), one discussion and a chain of replies, each replying to the one before.  At each depth
asked for, the next reply's admission is measured alone: the rows it added to ``feed`` (one per
ancestor in today's layout), what they take on disk (at the ``feed`` table's bytes per row,
from ``dbstat``), the bytes of its ``objects.ancestors`` column (every ancestor's root, also
one per level), and the rows of the whole chain so far (quadratic in its depth).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.rules.admission import prepare
from alexandria.service.bootstrap import found_library
from alexandria.store.sqlite import SqliteStorage


def _feed(db: Path) -> tuple[int, int]:
    """Rows of ``feed`` and the bytes of its pages (``dbstat``)."""
    with sqlite3.connect(db) as conn:
        rows = int(conn.execute("SELECT count(*) FROM feed").fetchone()[0])
        size = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'feed'").fetchone()[0]
        return rows, int(size or 0)


async def measure(depths: list[int], tmp: Path
                  ) -> list[tuple[int, int, int, int, int, float]]:
    f = found_library(seed=b"bench-feed-depth", created_at="2026-01-01T00:00:00.000Z")
    p = f.enroll("replier")
    db = tmp / "library.db"
    storage = SqliteStorage(db, f.genesis)
    await storage.open()
    out: list[tuple[int, int, int, int, int, float]] = []
    try:
        for doc in f.authority_documents():
            await storage.admit_authority(doc)
        base = now_ms() - 3_600_000
        clock = iter(range(base, base + 10**9))

        async def admit(content: dict[str, object]) -> str:
            env = p.envelope(f.genesis, content, format_ms(next(clock)))
            await storage.admit(prepare(json.dumps(env).encode(), f.genesis, index_text=True))
            return sha256_hex(canonical(env["record"]))

        parent = await admit({"kind": "discussion", "title": "Deep", "links": [],
                              "body": {"text": "How deep can a thread go?"}, "previous": ""})
        depth = 0
        for target in sorted(depths):
            while depth < target - 1:
                parent = await admit({"kind": "reply", "title": "Reply", "body": "and so on",
                                      "links": [{"relation": "replies_to", "target": parent}],
                                      "previous": ""})
                depth += 1
            rows_before, _ = _feed(db)
            t0 = time.perf_counter()
            parent = await admit({"kind": "reply", "title": "Reply", "body": "measured",
                                  "links": [{"relation": "replies_to", "target": parent}],
                                  "previous": ""})
            took = time.perf_counter() - t0
            depth += 1
            rows_after, bytes_after = _feed(db)
            with sqlite3.connect(db) as conn:
                listed = int(conn.execute("SELECT length(ancestors) FROM objects WHERE root = ?",
                                          (parent,)).fetchone()[0])
            added = rows_after - rows_before
            # pages grow in steps: the admission's share is its rows at the table's bytes/row
            out.append((depth, added, round(added * bytes_after / max(rows_after, 1)),
                        listed, rows_after, took))
    finally:
        await storage.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.feed_depth",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--depths", default="10,100,1000,2000",
                    help="comma-separated reply depths to measure")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    with tempfile.TemporaryDirectory() as d:
        rows = asyncio.run(measure(depths, Path(d)))
    print(f"{'depth':>7} {'feed rows':>10} {'feed bytes':>11} {'ancestors':>10}"
          f" {'chain rows':>11} {'admit ms':>9}")
    for depth, added, grew, listed, total, took in rows:
        print(f"{depth:>7} {added:>10} {grew:>11} {listed:>10} {total:>11}"
              f" {took * 1000:>9.1f}")
    print("feed bytes: the admission's rows at the feed table's bytes per row (dbstat);"
          " ancestors: bytes of the new object's objects.ancestors column")
    return 0


if __name__ == "__main__":
    sys.exit(main())
