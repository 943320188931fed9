"""Latency of a witness's ``add-checkpoint`` against a real ``alexandria witness serve``.

    .venv/bin/python -m bench.witness [--requests 200] [--batch 10]

Starts a witness on 127.0.0.1 following a toy log, then sends ``--requests`` sequential
keep-alive requests, each a checkpoint ``--batch`` leaves larger than the last with its
consistency proof, and prints p50/p95/max.  Every request is a full check, an Ed25519
verification and signature, and a synced SQLite commit: the figure is dominated by the fsync
of the machine's disk.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from alexandria.service.witness import init_witness_dir
from tests.support.witness import ToyLog, WitnessProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    log = ToyLog()
    with tempfile.TemporaryDirectory(prefix="alexandria-bench-witness-") as tmp:
        init_witness_dir(Path(tmp), "bench.example/w")
        witness = WitnessProcess(Path(tmp), [f"{log.origin}={log.verifier.vkey}"])
        try:
            times = []
            with httpx.Client(base_url=witness.url) as client:
                old = 0
                for i in range(args.requests):
                    log.append(*(b"leaf %d %d" % (i, j) for j in range(args.batch)))
                    body = log.request(old)
                    started = time.perf_counter()
                    r = client.post("/add-checkpoint", content=body)
                    times.append((time.perf_counter() - started) * 1000)
                    assert r.status_code == 200, r.text
                    old = log.size
        finally:
            witness.stop()
    times.sort()
    p95 = times[int(len(times) * 0.95) - 1]
    print(f"add-checkpoint x{len(times)} (tree {log.size} leaves): p50"
          f" {statistics.median(times):.2f} ms, p95 {p95:.2f} ms, max {times[-1]:.2f} ms")


if __name__ == "__main__":
    main()
