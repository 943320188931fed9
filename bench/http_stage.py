"""What the HTTP stage of an admission costs on its own, with nothing stored.

    .venv/bin/python -m bench.http_stage [--envelopes 20000] [--connections 32] [--prepared]

Serves the real app (uvicorn, Starlette, ``POST /api/entries``, ``admission.prepare``) in one
process whose admission writer is replaced by a stub answering every envelope as a new
admission (the signed record spliced as the writer process's answer is), and posts pre-signed
envelopes to it as ``bench.admission`` does.  It prints the rate and the server's CPU per
request, the time ``prepare`` took in place beside the same ``prepare`` in a tight loop, and —
with ``--prepared``, where ``prepare``'s results are computed before the run — what uvicorn,
Starlette, the handler and the socket cost without it.  ``bench.admission`` then tells what
the hand-off to the writer and the writer itself add.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from alexandria.api import write as write_api
from alexandria.api.app import create_app
from alexandria.core.records import signed_record_bytes
from alexandria.core.timestamps import format_ms, now_ms, parse_ms
from alexandria.rules.admission import Candidate, prepare
from alexandria.service.library import Library
from alexandria.store.interface import Admitted
from bench.admission import build, client_process
from bench.serving import free_port, wait_ready


class StubWriter:
    """Stands where ``WriterClient`` stands: every envelope is a new admission, nothing is
    stored and nothing is checked against state."""

    def __init__(self) -> None:
        self.sequence = 0

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def admit(self, cand: Candidate, dry_run: bool = False) -> Admitted:
        self.sequence += 1
        rec = cand.record
        admission = b'{"admitted_at":"%s","sequence":%d}' % (
            format_ms(now_ms()).encode(), self.sequence
        )
        signed = signed_record_bytes(cand.document, cand.record_length, rec.id, rec.id, admission)
        return Admitted(True, rec.id, rec.id, self.sequence, signed, admission)


class TimedPrepare:
    """``prepare`` as the handler calls it, timed in place (thread CPU time)."""

    def __init__(self, cached: dict[bytes, Candidate] | None) -> None:
        self.cached = cached
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, body: bytes, genesis: Any, index_text: bool = False) -> Candidate:
        if self.cached is not None:
            return self.cached[body]
        start = time.thread_time()
        cand = prepare(body, genesis, index_text=index_text)
        self.seconds += time.thread_time() - start
        self.calls += 1
        return cand


def tight_loop(bodies: list[bytes], library: Library) -> float:
    """Seconds per ``prepare`` over envelopes one after the other, after a warm-up on others;
    the caches that remember values seen are emptied afterwards, so the server meets every
    envelope as new."""
    for body in bodies[:500]:
        prepare(body, library.genesis, index_text=True)
    start = time.thread_time()
    for body in bodies[500:]:
        prepare(body, library.genesis, index_text=True)
    seconds = (time.thread_time() - start) / len(bodies[500:])
    parse_ms.cache_clear()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--envelopes", type=int, default=20_000)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--prepared", action="store_true",
                    help="compute prepare's results before the run: the stack without it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        genesis, log_key, bodies = build(args.envelopes, tmp)
        library = Library.from_files(genesis, tmp / "library.db", log_key)
        stub = StubWriter()
        library.writer = stub  # type: ignore[assignment]
        loop_seconds = tight_loop(bodies[: min(len(bodies), 5000)], library)
        timed = TimedPrepare(
            {b: prepare(b, library.genesis, index_text=True) for b in bodies}
            if args.prepared else None
        )
        write_api.prepare = timed  # type: ignore[attr-defined,assignment]
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(
            create_app(library), host="127.0.0.1", port=port, log_level="warning",
            access_log=False, proxy_headers=False, server_header=False, date_header=False,
        ))
        result: dict[str, Any] = {}

        def load() -> None:
            wait_ready(port, 20)
            q: Any = multiprocessing.Queue()
            cpu = time.process_time()
            proc = multiprocessing.Process(
                target=client_process, args=(port, bodies, args.connections, q)
            )
            proc.start()
            result["elapsed"], _client_cpu, result["statuses"] = q.get()
            result["cpu"] = time.process_time() - cpu
            proc.join()
            server.should_exit = True

        loader = threading.Thread(target=load)
        loader.start()
        server.run()
        loader.join()
    statuses = result["statuses"]
    ok = sum(1 for s in statuses if s == 201)
    print(f"envelopes             {len(statuses)} ({ok} answered 201)")
    print(f"HTTP stage            {ok / result['elapsed']:8.0f} admissions/s"
          f" ({args.connections} connections, 1 process, nothing stored)")
    print(f"server CPU            {result['cpu'] / max(ok, 1) * 1e6:8.0f} µs per request"
          " (load generator's thread included: ~1 µs)")
    if timed.calls:
        print(f"prepare in place      {timed.seconds / timed.calls * 1e6:8.0f} µs")
    else:
        print("prepare in place             0 µs (computed before the run)")
    print(f"prepare, tight loop   {loop_seconds * 1e6:8.0f} µs")


if __name__ == "__main__":
    main()
