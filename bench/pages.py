"""p50/p95 server time of every HTML page against a real server on a loader-built library.

    .venv/bin/python -m bench.loader --dir DIR --entries 100000
    .venv/bin/python -m bench.pages --dir DIR [--requests 200]

Starts ``alexandria serve`` (uvicorn, one process) on 127.0.0.1 over the library that
``bench.loader`` built in DIR and sends sequential keep-alive GETs of each page with inputs
drawn at random from the library: the catalogue (plain, searched with a word that 0.1–1 % of
the heads hold, filtered, deep offsets), an object page of each kind (a random root of that
kind: its sections, history with diffs, thread), the compare page of a revised object's first
and a later revision, a revision page, an author page, the log page (newest, and at a random
entry), and an id prefix typed in the search box or a page address (answered with a
redirect).  It prints, per page, the server's own time (the ``Server-Timing: app;dur=`` header
that the server sends with ``--server-timing``: parameters, reads, rendering) and the round
trip seen by the client, p50 and p95, beside the target (server time p95 ≤ 100 ms).  Results
are also written to DIR/pages.json.  The machine is shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.read_latency import memory_mb, percentile, sample_inputs, start_server
from bench.serving import free_port

TARGET_MS = 100.0
_TIMING = re.compile(r"app;dur=([0-9.]+)")


def roots_of_kind(directory: Path, kind: str, rng: random.Random, n: int = 200) -> list[str]:
    """Random roots of objects of ``kind`` (first revisions found at random sequences)."""
    conn = sqlite3.connect(directory / "library.db")
    try:
        top = conn.execute("SELECT max(sequence) FROM revisions").fetchone()[0]
        out: list[str] = []
        tries = 0
        while len(out) < n and tries < n * 200:
            tries += 1
            row = conn.execute(
                "SELECT root FROM revisions WHERE sequence = ? AND kind = ? AND id = root",
                (rng.randint(1, top), kind),
            ).fetchone()
            if row is not None:
                out.append(row[0])
        return out
    finally:
        conn.close()


def revised_pairs(directory: Path, rng: random.Random, n: int = 200) -> list[tuple[str, str]]:
    """Random (root, later revision) pairs of objects revised at least once."""
    conn = sqlite3.connect(directory / "library.db")
    try:
        top = conn.execute("SELECT max(sequence) FROM revisions").fetchone()[0]
        out: list[tuple[str, str]] = []
        tries = 0
        while len(out) < n and tries < n * 200:
            tries += 1
            row = conn.execute(
                "SELECT root, id FROM revisions WHERE sequence = ? AND id != root"
                " AND kind != 'vote'", (rng.randint(1, top),),
            ).fetchone()
            if row is not None:
                out.append((row[0], row[1]))
        return out
    finally:
        conn.close()


def pages(directory: Path, rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    inp = sample_inputs(directory, rng)
    kinds = {k: roots_of_kind(directory, k, rng) for k in
             ("space", "claim", "discussion", "document", "reply", "evidence")}

    def one(items: list[str]) -> str:
        return rng.choice(items)

    out: list[tuple[str, Callable[[], str]]] = [
        ("/ (catalogue)", lambda: "/"),
        ("/?kind=claim", lambda: "/?kind=claim"),
        ("/?offset=R(0..1000)", lambda: f"/?offset={rng.randrange(0, 1000)}"),
        ("/?sort=top&view=feed", lambda: "/?sort=top&view=feed"),
    ]
    if inp.mid:
        out += [
            ("/?q=<1 mid word>", lambda: f"/?q={one(inp.mid)}"),
            ("/?q=<2 mid words>", lambda: f"/?q={one(inp.mid)}+{one(inp.mid)}"),
            ("/?q=<1 mid word>&kind=claim", lambda: f"/?q={one(inp.mid)}&kind=claim"),
        ]
    if len(inp.common) >= 1:
        out.append(("/?q=<1 common word> (informative)", lambda: f"/?q={one(inp.common)}"))
    for kind, roots in kinds.items():
        if roots:
            out.append((f"/objects/{{{kind}}}", lambda roots=roots: f"/objects/{one(roots)}"))
    if inp.spaces:
        out.append(("/objects/{space}?section=children&offset=R(0..200)",
                    lambda: f"/objects/{one(inp.spaces)}?section=children"
                            f"&offset={rng.randrange(0, 200)}"))
    pairs = revised_pairs(directory, rng)
    if pairs:
        def compare() -> str:
            root, later = rng.choice(pairs)
            return f"/objects/{root}/compare?from={root}&to={later}"

        out.append(("/objects/{root}/compare?from={root}&to={later}", compare))
    size = log_size(directory)
    out += [
        ("/revisions/{rev}", lambda: f"/revisions/{one(inp.revisions)}"),
        ("/authors/{actor}", lambda: f"/authors/{one(inp.authors)}"),
        ("/log", lambda: "/log"),
        ("/log?before=R(1..size)", lambda: f"/log?before={rng.randint(1, size)}"),
        ("/log?entry=R(1..size)", lambda: f"/log?entry={rng.randint(1, size)}"),
        # an id as the pages print it (12 hex): looked up, answered with a redirect
        ("/?q={12-hex prefix} (302)", lambda: f"/?q={one(inp.revisions)[:12]}"),
        ("/objects/{12-hex prefix} (302)", lambda: f"/objects/{one(inp.revisions)[:12]}"),
    ]
    return out


def log_size(directory: Path) -> int:
    conn = sqlite3.connect(directory / "library.db")
    try:
        return int(conn.execute("SELECT max(sequence) FROM log").fetchone()[0] or 1)
    finally:
        conn.close()


def run(directory: Path, requests: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    routes = pages(directory, rng)
    port = free_port()
    server = start_server(directory, port, extra=("--server-timing",))
    results: list[dict[str, Any]] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for name, url in routes:
                for _ in range(5):  # warm the connection, the statement cache, the templates
                    client.get(url())
                server_ms: list[float] = []
                trip_ms: list[float] = []
                for _ in range(requests):
                    u = url()
                    t0 = time.perf_counter()
                    r = client.get(u)
                    trip_ms.append((time.perf_counter() - t0) * 1000)
                    if r.status_code != (302 if name.endswith("(302)") else 200):
                        raise SystemExit(f"{u}: {r.status_code} {r.text[:300]}")
                    m = _TIMING.search(r.headers.get("server-timing", ""))
                    if m is None:
                        raise SystemExit(f"{u}: no Server-Timing header")
                    server_ms.append(float(m.group(1)))
                row = {
                    "page": name,
                    "server_p50_ms": round(percentile(server_ms, 50), 2),
                    "server_p95_ms": round(percentile(server_ms, 95), 2),
                    "server_max_ms": round(max(server_ms), 2),
                    "trip_p50_ms": round(percentile(trip_ms, 50), 2),
                    "trip_p95_ms": round(percentile(trip_ms, 95), 2),
                    "target_ms": TARGET_MS,
                }
                row["ok"] = row["server_p95_ms"] <= TARGET_MS
                results.append(row)
                print(f"{name:52s} server p50 {row['server_p50_ms']:7.2f} p95"
                      f" {row['server_p95_ms']:7.2f} max {row['server_max_ms']:7.1f} | round trip"
                      f" p50 {row['trip_p50_ms']:7.2f} p95 {row['trip_p95_ms']:7.2f}"
                      f"  {'ok' if row['ok'] else 'OVER'}", flush=True)
        rss, peak = memory_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    summary = {"requests": requests, "rss_mb": round(rss, 1), "peak_rss_mb": round(peak, 1),
               "pages": results, "load_average": os.getloadavg()}
    (directory / "pages.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pages", description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, type=Path, help="a library built by bench.loader")
    ap.add_argument("--requests", type=int, default=200, help="timed requests per page")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    summary = run(args.dir, args.requests, args.seed)
    meta = json.loads((args.dir / "loader.json").read_text())
    print(f"{meta.get('entries', '?')} loader entries; server memory {summary['rss_mb']:.0f} MB"
          f" (peak {summary['peak_rss_mb']:.0f} MB); load average"
          f" {summary['load_average'][0]:.1f} (2 cores, shared: figures are noisy)")
    return 0 if all(r["ok"] for r in summary["pages"]) else 1


if __name__ == "__main__":
    sys.exit(main())
