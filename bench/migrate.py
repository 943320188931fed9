"""``alexandria migrate`` of a library into PostgreSQL: wall time, CPU and peak memory.

    .venv/bin/python -m bench.migrate --dir DIR [--runs 2]

Copies ``DIR/library.db`` (a library ``bench.loader`` built) into a fresh database of a
throwaway durable cluster (fsync on; tests/support/pgcluster.py), ``--runs`` times, each with
the ``alexandria migrate`` command in a process of its own, and prints for each run the wall
time, the command's CPU (user + system) and peak resident memory (its ``rusage``), and the CPU
PostgreSQL's processes spent meanwhile.  The copy of the tables is ``COPY``; most of the rest
is the catalogue's rebuild in PostgreSQL (``search_index.rebuild``, pipelined).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.serving import process_cpu, reaped_cpu
from tests.support.pgcluster import cluster

ROOT = Path(__file__).resolve().parent.parent


def pg_cpu(postmaster: int) -> float:
    """CPU seconds of PostgreSQL's processes, the backends that have ended included."""
    return process_cpu(postmaster) + reaped_cpu(postmaster)


def run(library: Path, url: str, postmaster: int) -> tuple[float, float, int, float, str]:
    """(wall s, the command's CPU s, its peak resident KiB, PostgreSQL's CPU s, its last
    line)."""
    pg_before = pg_cpu(postmaster)
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "alexandria.cli", "migrate", "--db", str(library), "--to", url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None
    out = child.stdout.read()
    _pid, status, usage = os.wait4(child.pid, 0)  # its own rusage, peak memory included
    wall = time.perf_counter() - started
    child.returncode = code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"alexandria migrate exited with {code}: {out}")
    return (wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss,
            pg_cpu(postmaster) - pg_before, out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", required=True, type=Path, help="a bench.loader library's folder")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    library = args.dir / "library.db"
    if not library.exists():
        ap.error(f"{library} does not exist: build it with bench.loader")
    with cluster(durable=True) as pg:
        for i in range(args.runs):
            wall, cpu, rss, spent, said = run(library, pg.database(f"m{i}", migrated=False),
                                               pg.postmaster)
            print(said)
            print(f"run {i + 1}: wall {wall:.1f} s, migrate CPU {cpu:.1f} s, peak memory"
                  f" {rss / 1024:.0f} MiB, PostgreSQL CPU {spent:.1f} s")


if __name__ == "__main__":
    main()
