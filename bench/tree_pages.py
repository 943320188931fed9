"""Which B-trees a batch of admissions writes, page by page.

```
cp -a /tmp/lib1m /tmp/lib1m-copy
.venv/bin/python -m bench.tree_pages --dir /tmp/lib1m-copy [--extend 2000] [--batch 2000]
```

Checkpoints the copy and takes a hash of every page of its database file, admits one batch of
the loader's mix (``bench.loader --extend``, one transaction by default), checkpoints again and
names the B-tree (table or index, SQLite's ``dbstat``) that owns each page whose bytes changed
or that is new.  Pages per entry, tree by tree: what each admission costs the WAL at commit and
the checkpoint after it, exactly, whatever the machine's load (``bench.loader --extend`` measures
the time).  A page changed twice in the run counts once, so the figures are a batch's when the
run is one batch.  It changes the library: run it on a copy.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import orjson

from bench.loader import extend

PAGE = 4096


def page_hashes(db: Path) -> list[bytes]:
    """A short hash of every page of ``db``, once its WAL is checkpointed into it."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    assert size == PAGE, size
    out: list[bytes] = []
    with db.open("rb") as f:
        while chunk := f.read(PAGE * 256):
            out += [hashlib.blake2b(chunk[i:i + PAGE], digest_size=8).digest()
                    for i in range(0, len(chunk), PAGE)]
    return out


def changed_by_tree(db: Path, before: list[bytes]) -> tuple[Counter[str], Counter[str]]:
    """Pages of each tree that differ from ``before`` (or are new), and each tree's size."""
    after = page_hashes(db)
    changed = [i + 1 for i, h in enumerate(after) if i >= len(before) or before[i] != h]
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        owner = dict(conn.execute("SELECT pageno, name FROM dbstat"))
    finally:
        conn.close()
    return Counter(owner.get(p, "(free list)") for p in changed), Counter(owner.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tree_pages",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, type=Path, help="a copy of a bench.loader library")
    ap.add_argument("--extend", type=int, default=2000, metavar="K", help="entries to admit")
    ap.add_argument("--batch", type=int, default=2000, help="admissions per transaction")
    ap.add_argument("--top", type=int, default=25, help="trees to print")
    args = ap.parse_args(argv)
    db = args.dir / "library.db"
    before = page_hashes(db)
    asyncio.run(extend(args.dir, args.extend, args.batch, workers=2, cache_mib=512,
                       drop_caches=False))
    changed, sizes = changed_by_tree(db, before)
    n = args.extend
    total = sum(changed.values())
    print(f"{total:,} pages changed by {n:,} admissions ({args.batch:,} per transaction):"
          f" {total / n:.2f} per entry")
    for name, pages in changed.most_common(args.top):
        print(f"  {pages / n:6.2f}/entry  {pages:8,}  {name}  (of {sizes[name]:,} pages)")
    print(orjson.dumps({"entries": n, "batch": args.batch, "pages_per_entry": round(total / n, 3),
                        "by_tree": {k: v for k, v in changed.most_common()}}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
