"""Admissions per second over HTTP, beside the per-envelope floor measured in the same run.

    .venv/bin/python -m bench.admission [--envelopes 20000] [--connections 32] [--workers 1]
        [--front-end granian|uvicorn] [--postgresql | --compare ROUNDS]
        [--batch N [--batch-connections 4]] [--words N]

The floor is what one envelope costs at the least on one core: JCS of the record, SHA-256,
Ed25519 verification of the proof, content-schema validation and one SQLite insert (committed
in groups, as the server does).  The HTTP figure posts pre-signed envelopes from a separate
process over keep-alive connections to a real ``alexandria serve`` on 127.0.0.1, each as
``alexandria publish`` sends it: the JCS bytes of the envelope.  With
``--batch N`` the envelopes are split in two halves: the first goes to ``POST /api/entries``
one per request, the second to ``POST /api/entries/batch`` N lines per request (PROTOCOL
§4.1), in the same run against the same server, each beside the floor.  With ``--compare
ROUNDS`` the same runs are made on SQLite and on PostgreSQL, one after the other, in an order
that alternates from round to round, and PostgreSQL's rate is given as a share of SQLite's in
the same round: on a shared machine the same code's rate moves by a third from one run to the
next, so only rates measured side by side compare.  With ``--words N`` each document and
discussion holds N words (and each claim's statement N/10) drawn from a vocabulary of 20,000
made-up words with Zipf's frequencies, as prose has them, instead of a short sentence repeated:
the full-text index's work per admission grows with a text's distinct words (N = 400: about
250 a document).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.keys import verify
from alexandria.core.schema import validate_content
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.files import write_json
from alexandria.service.bootstrap import found_library
from bench.loader import zipf_weights
from bench.serving import free_port, process_cpu, thread_cpu, wait_ready


class Prose:
    """Made-up words with Zipf's frequencies (the k-th most frequent word about 1/k as often as
    the first), from a fixed seed: texts whose distinct words grow with their length as
    prose's do."""

    VOCABULARY = 20_000

    def __init__(self, seed: int = 41) -> None:
        self._random = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        self._words = ["".join(self._random.choices(letters, k=self._random.randint(2, 10)))
                       for _ in range(self.VOCABULARY)]
        self._cumulative = zipf_weights(self.VOCABULARY)

    def text(self, words: int) -> str:
        return " ".join(self._random.choices(self._words, cum_weights=self._cumulative, k=words))


def build(n: int, tmp: Path, words: int = 0) -> tuple[Path, Path, list[bytes]]:
    """A library with 4 participants and n envelopes: spaces, claims, documents and
    discussions; with ``words``, their texts are ``Prose`` of that many words (a claim's
    statement a tenth), else a short sentence repeated."""
    prose = Prose() if words else None
    f = found_library(seed=b"bench-admission", created_at="2026-01-01T00:00:00.000Z")
    people = [f.enroll(f"p{i}") for i in range(4)]
    write_json(tmp / "genesis.json", f.genesis_document)
    f.log_key.save(tmp / "log.key")
    base = now_ms() - 3_600_000
    bodies: list[bytes] = []
    spaces = []
    for i, p in enumerate(people):  # one space each, published first
        env = p.envelope(
            f.genesis,
            {
                "kind": "space",
                "title": f"Space {i}",
                "body": {"summary": f"Space number {i}"},
                "links": [],
                "previous": "",
            },
            format_ms(base),
        )
        spaces.append(sha256_hex(canonical(env["record"])))
        bodies.append(canonical(env))
    for i in range(n - len(people)):
        p = people[i % len(people)]
        space = spaces[i % len(people)]
        kind = ("claim", "document", "discussion")[i % 3]
        body: dict[str, Any]
        if kind == "claim":
            body = {
                "statement": (prose.text(max(words // 10, 1)) if prose else
                              f"Statement {i} about arithmetic and its domain " * 3),
                "scope": "Natural numbers",
                "assumptions": ["Peano axioms"],
            }
        else:
            body = {"text": prose.text(words) if prose else
                    f"Text {i}: a synthesis of the domain and its definitions. " * 10}
        env = p.envelope(
            f.genesis,
            {
                "kind": kind,
                "title": f"{kind.title()} {i}" + (f": {prose.text(5)}" if prose else ""),
                "body": body,
                "links": [{"relation": "contained_in", "target": space}],
                "previous": "",
            },
            format_ms(base + 1 + i),
        )
        bodies.append(canonical(env))
    return tmp / "genesis.json", tmp / "log.key", bodies


def floor(bodies: list[bytes]) -> float:
    """Envelopes per second on one core for the irreducible work."""
    envs = [json.loads(b) for b in bodies]
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t(id TEXT PRIMARY KEY, leaf BLOB)")
    start = time.perf_counter()
    batch = []
    for env in envs:
        rec = env["record"]
        data = canonical(rec)
        rid = sha256_hex(data)
        cert = env["signature"]["certificate"]["certificate"]
        assert verify(cert["worker"], env["signature"]["proof"], data)
        body = json.loads(rec["body"]) if rec["kind"] not in ("reply", "vote") else rec["body"]
        validate_content(
            {
                "kind": rec["kind"],
                "title": rec["title"],
                "body": body,
                "links": rec["links"],
                "previous": rec["previous"],
            }
        )
        batch.append((rid, canonical(env)))
        if len(batch) == 100:
            conn.executemany("INSERT INTO t VALUES (?, ?)", batch)
            conn.commit()
            batch.clear()
    conn.executemany("INSERT INTO t VALUES (?, ?)", batch)
    conn.commit()
    return len(envs) / (time.perf_counter() - start)






class WalWatch:
    """The largest size the database's write-ahead log reaches while the load runs (it must
    stay bounded however long admissions keep coming: see ``wal_checkpointer``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.largest = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.1):
            with contextlib.suppress(OSError):
                self.largest = max(self.largest, self.path.stat().st_size)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 answer of a known length: its status and its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


async def _post_all(port: int, bodies: list[bytes], connections: int) -> list[int]:
    """A minimal keep-alive HTTP/1.1 client: the load generator must cost far less than the
    server, on the same 2 cores."""
    statuses: list[int] = []
    queue = list(reversed(bodies))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while queue:
            body = queue.pop()
            writer.write(
                b"POST /api/entries HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            status, _answer = await _read_answer(reader)
            statuses.append(status)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return statuses


async def _post_batches(port: int, bodies: list[bytes], lines: int,
                        connections: int) -> list[int]:
    """Each request ``lines`` envelopes; one status per envelope (its line's)."""
    statuses: list[int] = []
    queue = [b"\n".join(bodies[i:i + lines]) for i in range(0, len(bodies), lines)]
    queue.reverse()

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while queue:
            body = queue.pop()
            writer.write(
                b"POST /api/entries/batch HTTP/1.1\r\nHost: bench\r\n"
                b"Content-Type: application/x-ndjson\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            status, answer = await _read_answer(reader)
            if status != 200:
                statuses.append(status)
                continue
            statuses.extend(int(line[10:13]) for line in answer.splitlines())  # {"status":S
        writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return statuses


def client_process(port: int, bodies: list[bytes], connections: int, out: Any,
                   batch: int = 0) -> None:
    import uvloop

    t, cpu = time.perf_counter(), time.process_time()
    if batch:
        statuses = uvloop.run(_post_batches(port, bodies, batch, connections))
    else:
        statuses = uvloop.run(_post_all(port, bodies, connections))
    out.put((time.perf_counter() - t, time.process_time() - cpu, statuses))


def run_load(port: int, pid: int, bodies: list[bytes], connections: int, batch: int,
             wal_path: Path, postmaster: int = 0) -> dict[str, Any]:
    """One load from a separate process: its wall time, CPU on both sides (and PostgreSQL's
    processes', ``postmaster``), statuses."""
    writer_before = writer_counters(port)
    cpu_before = process_cpu(pid)
    pg_before = process_cpu(postmaster) if postmaster else 0.0
    threads_before = thread_cpu(pid)
    q: Any = multiprocessing.Queue()
    proc = multiprocessing.Process(target=client_process,
                                   args=(port, bodies, connections, q, batch))
    proc.start()
    wal = WalWatch(wal_path)
    elapsed, client_cpu, statuses = q.get()
    wal.stop()
    proc.join()
    cpu = process_cpu(pid) - cpu_before
    pg_cpu = process_cpu(postmaster) - pg_before if postmaster else 0.0
    threads = {k: v - threads_before.get(k, 0.0) for k, v in thread_cpu(pid).items()}
    writer_after = writer_counters(port)
    writer = {k: writer_after[k] - writer_before[k] for k in writer_after}
    return {"elapsed": elapsed, "client_cpu": client_cpu, "statuses": statuses, "cpu": cpu,
            "threads": threads, "wal": wal.largest, "pg_cpu": pg_cpu, "writer": writer}


WRITER_COUNTERS = ("transactions", "items", "busy_seconds", "cpu_seconds")


def writer_counters(port: int) -> dict[str, float]:
    """The ``alexandria_writer_*_total`` counters (``service/writer_metrics.py``) of the
    server's writer that admits."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{port}/metrics").raise_for_status().text
    found = {(s.name, s.labels.get("process")): s.value
             for f in text_string_to_metric_families(text) for s in f.samples}
    # the writer that admits: the writer process's, or a one-process server's own
    process = "writer" if ("alexandria_writer_items_total", "writer") in found else "http"
    return {k: found.get((f"alexandria_writer_{k}_total", process), 0.0)
            for k in WRITER_COUNTERS}


def report(label: str, load: dict[str, Any], rate_floor: float, postgresql: bool,
           requests: int) -> None:
    statuses, elapsed, cpu = load["statuses"], load["elapsed"], load["cpu"]
    ok = admitted(load)
    rate = ok / elapsed
    print(f"{label:<21} {rate:8.0f} admissions/s ({ok} of {len(statuses)} admitted, 201;"
          f" {rate / rate_floor:.2f} of the floor)")
    print(f"  server CPU          {cpu / max(ok, 1) * 1e6:8.0f} µs per admission"
          f" ({cpu / elapsed:.2f} cores busy)")
    print(f"  load generator CPU  {load['client_cpu'] / max(requests, 1) * 1e6:8.0f} µs per"
          f" request ({load['client_cpu'] / elapsed:.2f} cores busy)")
    if postgresql:
        print(f"  PostgreSQL CPU      {load['pg_cpu'] / max(ok, 1) * 1e6:8.0f} µs per admission"
              f" ({load['pg_cpu'] / elapsed:.2f} cores busy)")
    else:
        print(f"  write-ahead log     {load['wal'] / 2**20:8.1f} MiB at most during the run")
    by_process: dict[int, float] = {}
    for (pid, _tid), t in load["threads"].items():
        by_process[pid] = by_process.get(pid, 0.0) + t
    print("  by process          "
          + ", ".join(f"{pid} {t / max(ok, 1) * 1e6:.0f} µs" for pid, t in
                      sorted(by_process.items(), key=lambda kv: -kv[1])))
    w = load["writer"]
    if w["transactions"]:
        items = max(w["items"], 1)
        print(f"  writer              busy {w['busy_seconds'] / elapsed:.0%} of the run,"
              f" {w['items'] / w['transactions']:.1f} items a transaction;"
              f" {w['busy_seconds'] / items * 1e6:.0f} µs wall,"
              f" {w['cpu_seconds'] / items * 1e6:.0f} µs CPU an item")
    # every thread that spent 5 µs an admission or more: in the writer process the writer
    # thread and the event loop, in each HTTP process its preparing threads and event loop
    busiest = [(k, t) for k, t in sorted(load["threads"].items(), key=lambda kv: -kv[1])
               if t / max(ok, 1) >= 5e-6]
    print("  busiest threads     "
          + ", ".join(f"{pid}/{tid} {t / max(ok, 1) * 1e6:.0f} µs" for (pid, tid), t in busiest))




Measured = dict[str, float]  # admissions a second, by route


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--envelopes", type=int, default=20_000)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--workers", type=int, default=1, help="HTTP server processes")
    ap.add_argument("--writer-process", action="store_true",
                    help="serve with a dedicated admission writer process")
    ap.add_argument("--front-end", choices=("granian", "uvicorn"), default="granian",
                    help="the HTTP server in front of the app (uvicorn: for comparison)")
    ap.add_argument("--batch", type=int, default=0, metavar="N",
                    help="also admit half of the envelopes through POST /api/entries/batch,"
                    " N lines a request (at most 1000)")
    ap.add_argument("--batch-connections", type=int, default=4,
                    help="connections sending batches at once")
    ap.add_argument("--words", type=int, default=0, metavar="N",
                    help="texts of N made-up words with Zipf's frequencies (a claim's statement"
                    " N/10) instead of a short sentence repeated")
    backend = ap.add_mutually_exclusive_group()
    backend.add_argument("--postgresql", action="store_true",
                         help="store in PostgreSQL: a throwaway durable cluster (fsync on) on a"
                         " Unix socket, started for the run (tests/support/pgcluster.py)")
    backend.add_argument("--compare", type=int, default=0, metavar="ROUNDS",
                         help="ROUNDS rounds of SQLite and PostgreSQL, one after the other in"
                         " alternating order, then each round's PostgreSQL rate as a share of"
                         " SQLite's, per route, and the medians")
    args = ap.parse_args()
    if not args.compare:
        measure(args, args.postgresql)
        return
    rounds: list[dict[bool, Measured]] = []
    for i in range(args.compare):
        rounds.append({})
        # alternated, so that a drift of the machine's speed favours neither backend
        for postgresql in ((False, True) if i % 2 == 0 else (True, False)):
            print(f"--- round {i + 1}, {'PostgreSQL' if postgresql else 'SQLite'}")
            rounds[-1][postgresql] = measure(args, postgresql)
            print()
    compare(rounds)


def compare(rounds: list[dict[bool, Measured]]) -> None:
    """Each round's rates of both backends, per route, and PostgreSQL's as a share of
    SQLite's in the same round; then the medians of each column."""
    print(f"{'round':<6} {'route':<16} {'SQLite /s':>10} {'PostgreSQL /s':>14} {'share':>6}")
    routes = list(rounds[0][False])
    for i, measured in enumerate(rounds, 1):
        for route in routes:
            sqlite, pg = measured[False][route], measured[True][route]
            print(f"{i:<6} {route:<16} {sqlite:10.0f} {pg:14.0f} {pg / sqlite:6.0%}")
    for route in routes:
        sqlite = statistics.median(m[False][route] for m in rounds)
        pg = statistics.median(m[True][route] for m in rounds)
        share = statistics.median(m[True][route] / m[False][route] for m in rounds)
        print(f"{'median':<6} {route:<16} {sqlite:10.0f} {pg:14.0f} {share:6.0%}")


def measure(args: argparse.Namespace, postgresql: bool) -> Measured:
    """One server on a fresh library, its loads, the report; the admission rate of each load."""
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        db = str(tmp / "library.db")
        postmaster = 0
        if postgresql:
            from tests.support.pgcluster import cluster

            pg = stack.enter_context(cluster(durable=True))
            db = pg.database("bench")
            postmaster = pg.postmaster
        genesis, log_key, bodies = build(args.envelopes, tmp, args.words)
        # the best of three passes: on a shared machine one pass may meet a neighbour's burst
        rate_floor = max(floor(bodies[:3000]) for _ in range(3))
        port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "alexandria.cli",
            "serve",
            "--genesis",
            str(genesis),
            "--db",
            db,
            "--log-key",
            str(log_key),
            "--port",
            str(port),
        ]
        cmd += ["--workers", str(args.workers)]  # serve's default depends on the cores
        if args.writer_process:
            cmd += ["--writer-process"]
        cmd += ["--front-end", args.front_end]
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=os.environ.copy())
        try:
            wait_ready(port, 20)
            from alexandria.service.bootstrap import found_library as again

            f = again(seed=b"bench-admission", created_at="2026-01-01T00:00:00.000Z")
            import httpx

            for doc in f.authority_documents():
                httpx.post(f"http://127.0.0.1:{port}/api/authority", json=doc).raise_for_status()
            # spaces first, sequentially; then the rest concurrently
            for b in bodies[:4]:
                r = httpx.post(f"http://127.0.0.1:{port}/api/entries", content=b)
                assert r.status_code == 201, r.text
            rest = bodies[4:]
            single = rest[: len(rest) // 2] if args.batch else rest
            loads = [("single route", run_load(port, server.pid, single, args.connections, 0,
                                               tmp / "library.db-wal", postmaster), len(single))]
            if args.batch:
                batched = rest[len(rest) // 2:]
                loads.append((f"batch of {args.batch}", run_load(
                    port, server.pid, batched, args.batch_connections, args.batch,
                    tmp / "library.db-wal", postmaster), -(-len(batched) // args.batch)))
        finally:
            server.terminate()
            server.wait()
    processes = (f"{args.workers} HTTP process{'es' if args.workers > 1 else ''}"
                 f"{' + 1 writer process' if args.workers > 1 or args.writer_process else ''}")
    print(f"storage               {'PostgreSQL' if postgresql else 'SQLite'}, {processes}")
    print(f"floor (1 core)        {rate_floor:8.0f} envelopes/s  ({1e6 / rate_floor:.0f} µs each)")
    if args.words:
        print(f"texts                 {args.words} words a document or discussion")
    print(f"single route          {args.connections} connections")
    if args.batch:
        print(f"batch route           {args.batch} lines a request,"
              f" {args.batch_connections} connections")
    for label, load, requests in loads:
        report(label, load, rate_floor, postgresql, requests)
    return {label: admitted(load) / load["elapsed"] for label, load, _requests in loads}


def admitted(load: dict[str, Any]) -> int:
    return sum(1 for s in load["statuses"] if s == 201)


if __name__ == "__main__":
    main()
