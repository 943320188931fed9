"""p50/p95 latency per read route against a real server, and the server's memory.

    .venv/bin/python -m bench.loader --dir DIR --entries 100000
    .venv/bin/python -m bench.read_latency --dir DIR [--requests 200] [--cold] [--commits]
        [--db postgresql://…]

Starts ``alexandria serve`` (``--workers 1``) on 127.0.0.1 over the library that
``bench.loader`` built in DIR, sends sequential keep-alive GETs — each route with inputs drawn
at random from the library (revisions, spaces, discussions, authors, and search words chosen
by how many heads hold them) — and prints p50/p95/max per route beside its target, then the
server's resident memory (VmRSS now, VmHWM peak, summed over its processes: Granian serves
from a worker process it spawns) and, per request, the server's read system
calls and the bytes its disk supplied (/proc/PID/io).  Targets: catalogue with ``q`` and
``sort=relevance`` p95 ≤ 50 ms, every other read p95 ≤ 10 ms, memory < 300 MB.  The figures
include the client's own time on the same machine; on a shared machine they are noisy.
Results are also written to DIR/read_latency.json (read_latency_cold.json with --cold,
read_latency_cold_commits.json with both).

``--cold`` (root only) measures a library that no longer fits in memory: before each route's
timed requests it writes dirty pages back and drops the operating system's page cache
(``sync; echo 3 > /proc/sys/vm/drop_caches``), so only what the server itself holds in memory
(its own page caches, its memory maps) stays warm, as on a host whose files are much larger
than its RAM.  Its targets are the cold ones: every non-search route p95 ≤ 20 ms,
every search p95 ≤ 200 ms and max ≤ 1 s, server memory ≤ 300 MB.  Dropping the cache slows
everything else on the machine for a while: run it only when measuring.

``--commits`` (SQLite) has another connection commit a change to the library before each timed
request — a row of ``meta``, ``bench_commit``, removed at the end — as the writer's admissions
do on a library that is read while it grows.  SQLite resets a connection's page cache when the
database changed since its last read, so then the server's own caches keep nothing from one
request to the next, and with ``--cold`` every page a request needs comes from the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.serving import free_port

RELEVANCE_TARGET_MS = 50.0
READ_TARGET_MS = 10.0
MEMORY_TARGET_MB = 300.0
COLD_SEARCH_TARGET_MS = 200.0
COLD_SEARCH_MAX_MS = 1000.0
COLD_READ_TARGET_MS = 20.0


@dataclass
class Inputs:
    revisions: list[str]
    roots: list[str]
    spaces: list[str]
    discussions: list[str]
    authors: list[str]
    follow_root: str
    rare: list[str]
    mid: list[str]
    common: list[str]
    log_size: int
    objects: int


def sample_inputs(directory: Path, rng: random.Random, n: int = 400) -> Inputs:
    meta = json.loads((directory / "loader.json").read_text())
    conn = sqlite3.connect(directory / "library.db")
    try:
        top = conn.execute("SELECT max(sequence) FROM revisions").fetchone()[0]

        def pick(sql: str, kinds: tuple[str, ...] = ()) -> list[str]:
            out: list[str] = []
            tries = 0
            while len(out) < n and tries < n * 50:
                tries += 1
                seq = rng.randint(1, top)
                row = conn.execute(sql, (seq, *kinds)).fetchone()
                if row is not None:
                    out.append(row[0])
            return out

        revisions = pick("SELECT id FROM revisions WHERE sequence = ?")
        roots = pick("SELECT root FROM revisions WHERE sequence = ? AND kind != 'vote'")
        spaces = pick("SELECT root FROM revisions WHERE sequence = ? AND kind = ?", ("space",))
        discussions = pick("SELECT id FROM revisions WHERE sequence = ? AND kind = ?",
                           ("discussion",))
        heads = conn.execute("SELECT count(*) FROM catalogue").fetchone()[0]
        conn.execute("CREATE VIRTUAL TABLE temp.bench_vocab"
                     " USING fts5vocab(main, catalogue_text, 'row')")
        terms = conn.execute("SELECT term, doc FROM temp.bench_vocab").fetchall()
        log_size = conn.execute("SELECT max(sequence) FROM log").fetchone()[0]
    finally:
        conn.close()

    def band(lo: float, hi: float) -> list[str]:
        found = [t for t, d in terms if lo * heads <= d < hi * heads]
        rng.shuffle(found)
        return found[:n]

    return Inputs(
        revisions, roots, spaces, discussions, meta["actors"], meta["follow_root"],
        rare=band(0.0, 0.0005), mid=band(0.001, 0.01), common=band(0.05, 1.01),
        log_size=log_size, objects=heads,
    )




def start_server(directory: Path, port: int, db: str | None = None,
                 extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "alexandria.cli", "serve", "--genesis",
           str(directory / "genesis.json"), "--db", db or str(directory / "library.db"),
           "--log-key", str(directory / "log.key"), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600  # a first open may rebuild derived indexes
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/genesis", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start")


def process_tree(pid: int) -> list[int]:
    """The server and every process below it: Granian serves from worker processes it spawns,
    and they hold the database connections."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) summed over the server's processes (shared pages counted in each)."""
    fields = {"VmRSS": 0.0, "VmHWM": 0.0}
    for p in process_tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, value = line.partition(":")
            if name in fields:
                fields[name] += int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def io_counts(pid: int) -> tuple[int, int]:
    """(read system calls, bytes read from storage) of a process so far: SQLite reads every
    page it does not hold in its own cache with one ``pread``, so the first counts the pages a
    route missed, whatever the machine's load; the second, those the disk had to supply."""
    calls = disk = 0
    for p in process_tree(pid):
        try:
            lines = Path(f"/proc/{p}/io").read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split(": ") for line in lines)
        calls += int(fields["syscr"])
        disk += int(fields["read_bytes"])
    return calls, disk


def routes(inp: Inputs, rng: random.Random) -> list[tuple[str, float, Callable[[], str]]]:
    """(name, target ms, a function giving the next URL)."""

    def one(items: list[str]) -> str:
        return rng.choice(items)

    def words(pool: list[str], k: int) -> str:
        return "+".join(rng.sample(pool, k))

    def log_range(start: int) -> str:
        return f"/api/log/entries?start={start}&end={start + 50}"

    rel, read = RELEVANCE_TARGET_MS, READ_TARGET_MS
    out: list[tuple[str, float, Callable[[], str]]] = [
        ("entries/{rev}", read, lambda: f"/api/entries/{one(inp.revisions)}"),
        ("entries/{rev}/head", read, lambda: f"/api/entries/{one(inp.revisions)}/head"),
        ("entries/{rev}/connections", read,
         lambda: f"/api/entries/{one(inp.roots)}/connections"),
        ("entries/{disc}/discussion", read,
         lambda: f"/api/entries/{one(inp.discussions)}/discussion"),
        ("objects/{rev}", read, lambda: f"/api/objects/{one(inp.roots)}"),
        ("objects/{space}?section=children", read,
         lambda: f"/api/objects/{one(inp.spaces)}?section=children"),
        ("catalogue", read, lambda: "/api/catalogue"),
        ("catalogue?offset=R(0..1000)", read,
         lambda: f"/api/catalogue?offset={rng.randrange(0, 1000)}"),
        ("catalogue?offset=R(0..10000) (informative: cost grows with offset)", read,
         lambda: f"/api/catalogue?offset={rng.randrange(0, 10000)}"),
        ("catalogue?kind=claim", read, lambda: "/api/catalogue?kind=claim"),
        ("catalogue?view=feed&projection=summary", read,
         lambda: "/api/catalogue?view=feed&projection=summary"),
        ("catalogue?sort=top", read, lambda: "/api/catalogue?sort=top"),
        ("catalogue?sort=top&kind=document", read,
         lambda: "/api/catalogue?sort=top&kind=document"),
        ("catalogue?author=A", read, lambda: f"/api/catalogue?author={one(inp.authors)}"),
        ("catalogue?author=A&sort=top", read,
         lambda: f"/api/catalogue?author={one(inp.authors)}&sort=top"),
        ("catalogue?method=M", read, lambda: "/api/catalogue?method=" + rng.choice(
            ("proof", "example", "experiment", "observation", "source", "counterexample"))),
        ("catalogue?verdict=V", read, lambda: "/api/catalogue?verdict=" + rng.choice(
            ("open", "supported", "disputed", "accepted", "refuted"))),
        ("scores?author=A", read, lambda: f"/api/scores?author={one(inp.authors)}"),
        ("changes?root=follow (first page)", read,
         lambda: f"/api/changes?root={inp.follow_root}"),
        ("log/entries", read, lambda: log_range(rng.randrange(0, inp.log_size - 50))),
        ("log/proof/inclusion", read, lambda: "/api/log/proof/inclusion"
         f"?index={rng.randrange(0, inp.log_size)}&size={inp.log_size}"),
        ("genesis", read, lambda: "/api/genesis"),
        ("contract", read, lambda: "/api/contract"),
    ]
    if inp.mid:
        out += [
            ("catalogue?q=<1 mid word>&sort=relevance", rel,
             lambda: f"/api/catalogue?q={words(inp.mid, 1)}&sort=relevance"),
            ("catalogue?q=<2 mid words>&sort=relevance", rel,
             lambda: f"/api/catalogue?q={words(inp.mid, 2)}&sort=relevance"),
            ("catalogue?q=<1 mid word>&sort=relevance&kind=claim", rel,
             lambda: f"/api/catalogue?q={words(inp.mid, 1)}&sort=relevance&kind=claim"),
            ("catalogue?q=<1 mid word>&sort=new", read,
             lambda: f"/api/catalogue?q={words(inp.mid, 1)}&sort=new"),
            ("catalogue?q=<1 mid word>&projection=summary", rel,
             lambda: f"/api/catalogue?q={words(inp.mid, 1)}&projection=summary"),
        ]
    if inp.rare:
        out.append(("catalogue?q=<1 rare word>&sort=relevance", rel,
                    lambda: f"/api/catalogue?q={words(inp.rare, 1)}&sort=relevance"))
    if len(inp.common) >= 2:
        out.append(("catalogue?q=<common word + mid word>", rel,
                    lambda: f"/api/catalogue?q={words(inp.common, 1)}+{words(inp.mid, 1)}"))
        out.append(("catalogue?q=<1 common word>", rel,
                    lambda: f"/api/catalogue?q={words(inp.common, 1)}"))
    return out


def drop_page_cache() -> None:
    """Write dirty pages back, then drop the page cache, dentries and inodes (root only)."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        raise SystemExit(f"--cold needs root to write /proc/sys/vm/drop_caches: {exc}") from exc


def cold_targets(name: str, target: float) -> tuple[float, float | None]:
    """(p95 target, max target or None) of a route in the cold mode."""
    if target == RELEVANCE_TARGET_MS or "?q=" in name:
        return COLD_SEARCH_TARGET_MS, COLD_SEARCH_MAX_MS
    return COLD_READ_TARGET_MS, None


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Committer:
    """Commits a change to the library, from a connection of its own (``--commits``)."""

    KEY = "bench_commit"

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.n = 0

    def commit(self) -> None:
        self.n += 1
        self.conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key)"
                          " DO UPDATE SET value = excluded.value", (self.KEY, str(self.n)))

    def close(self) -> None:
        self.conn.execute("DELETE FROM meta WHERE key = ?", (self.KEY,))
        self.conn.close()


def run(directory: Path, requests: int, seed: int, cold: bool = False,
        only: tuple[str, ...] = (), db: str | None = None,
        commits: bool = False) -> dict[str, Any]:
    rng = random.Random(seed)
    inp = sample_inputs(directory, rng)
    port = free_port()
    server = start_server(directory, port, db)
    results: list[dict[str, Any]] = []
    committer = Committer(directory / "library.db") if commits else None
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for name, target, url in routes(inp, rng):
                if only and not any(part in name for part in only):
                    continue
                for _ in range(5):  # warm the connection and the statement cache
                    client.get(url())
                most: float | None = None
                if cold:
                    drop_page_cache()
                    target, most = cold_targets(name, target)
                times = []
                calls, disk = io_counts(server.pid)
                for _ in range(requests):
                    u = url()
                    if committer is not None:
                        committer.commit()
                    t0 = time.perf_counter()
                    r = client.get(u)
                    times.append((time.perf_counter() - t0) * 1000)
                    if r.status_code != 200:
                        raise SystemExit(f"{u}: {r.status_code} {r.text[:300]}")
                calls_after, disk_after = io_counts(server.pid)
                reads = (calls_after - calls) / requests
                disk_kib = (disk_after - disk) / requests / 1024
                p50, p95 = percentile(times, 50), percentile(times, 95)
                ok = p95 <= target and (most is None or max(times) <= most)
                results.append({"route": name, "p50_ms": round(p50, 2), "p95_ms": round(p95, 2),
                                "max_ms": round(max(times), 2), "mean_ms":
                                round(statistics.fmean(times), 2), "target_ms": target,
                                "max_target_ms": most, "ok": ok, "reads_per_request":
                                round(reads, 1), "disk_kib_per_request": round(disk_kib, 1),
                                "rss_mb": round(memory_mb(server.pid)[0], 1)})
                limit = f"{target:4.0f}" + (f"/{most:.0f}" if most is not None else "")
                print(f"{name:66s} p50 {p50:7.2f}  p95 {p95:7.2f}  max {max(times):7.1f}"
                      f"  target {limit:>9s}  rss {results[-1]['rss_mb']:4.0f} MB"
                      f"  reads/req {reads:6.1f}  disk {disk_kib:6.1f} KiB/req"
                      f"  {'ok' if ok else 'OVER'}", flush=True)
        rss, peak = memory_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
        if committer is not None:
            committer.close()
    print(f"server memory: {rss:.0f} MB resident, {peak:.0f} MB peak"
          f" (target < {MEMORY_TARGET_MB:.0f} MB)")
    summary = {"objects": inp.objects, "log_size": inp.log_size, "requests": requests,
               "cold": cold, "commits": commits, "rss_mb": round(rss, 1),
               "peak_rss_mb": round(peak, 1), "routes": results,
               "load_average": os.getloadavg()}
    name = ("read_latency" + ("_cold" if cold else "") + ("_commits" if commits else "")
            + ".json")
    (directory / name).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.read_latency",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, type=Path, help="a library built by bench.loader")
    ap.add_argument("--requests", type=int, default=200, help="timed requests per route")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cold", action="store_true",
                    help="drop the page cache before each route (root): the cold mode")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="measure only the routes whose name contains TEXT (repeatable)")
    ap.add_argument("--db", metavar="URL", help="serve this database instead of DIR/library.db:"
                    " its PostgreSQL copy (alexandria migrate --db DIR/library.db --to URL)")
    ap.add_argument("--commits", action="store_true",
                    help="another connection commits before each request, as admissions do"
                    " (SQLite): the server's page caches keep nothing between requests")
    args = ap.parse_args(argv)
    if args.commits and args.db:
        ap.error("--commits commits to DIR/library.db: not with --db")
    summary = run(args.dir, args.requests, args.seed, args.cold, tuple(args.only), args.db,
                  args.commits)
    print(f"{summary['log_size']:,} log entries, {summary['objects']:,} catalogue heads;"
          f" load average {summary['load_average'][0]:.1f} (2 cores, shared: figures are noisy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
