"""Mirror throughput: entries verified and stored per second, beside ``alexandria verify`` alone.

    .venv/bin/python -m bench.mirror [--entries 20000] [--dir DIR]

Builds (once, cached) the library of ``bench.verify_export`` (its own generator: every kind,
revisions and votes, a checkpoint every 1,000 entries), then on the same log:

1. ``verify``: the offline verifier on its export, one thread (``verify_export(workers=0)``);
2. ``mirror``: a fresh mirror database following the library served by ``alexandria serve
   --workers 1`` on 127.0.0.1 — exactly the mirror's follower
   (``service/follow.sync_from_server``: pages of ``/api/log/entries``, checkpoints,
   consistency proofs; every entry verified and stored through the admission code, every
   projection written);
3. ``catch-up from an export``: the same into a fresh database from the export file
   (``restore --catch-up EXPORT``).

Figures on a shared machine are noisy; the load average is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from alexandria.audit import verify
from alexandria.core.canonical import canonical, sha256_hex
from alexandria.service.follow import catch_up
from alexandria.service.library import load_genesis
from alexandria.store.sqlite import sqlite_storage
from bench.verify_export import build
from tests.support.liveserver import free_port


async def _follow(genesis_path: Path, db: Path, source: str) -> int:
    storage = sqlite_storage(db, load_genesis(genesis_path))
    await storage.open()
    try:
        follower = await catch_up(storage, source)
        return follower.size
    finally:
        await storage.close()


def _timed_follow(genesis_path: Path, source: str) -> tuple[int, float]:
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        t = time.perf_counter()
        size = asyncio.run(_follow(genesis_path, Path(tmp) / "mirror.db", source))
        return size, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--dir", default="bench/out/verify-export")
    args = ap.parse_args()
    directory = Path(args.dir) / f"own-{args.entries}"
    export = build(directory, args.entries)
    genesis_path = directory / "genesis.json"
    header = orjson.loads(export.open("rb").readline())
    pin = sha256_hex(canonical(header["genesis"]["genesis"]))
    size = int(header["size"])
    print(f"{size:,} entries, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")

    t = time.perf_counter()
    with export.open("rb", buffering=1 << 20) as fh:
        verify.verify_export(fh, pin, workers=0)
    took = time.perf_counter() - t
    print(f"verify (one thread):           {size / took:8,.0f} entries/s ({took:.1f} s)",
          flush=True)

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "alexandria.cli", "serve", "--genesis", str(genesis_path),
         "--db", str(directory / "library.db"), "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/api/log/checkpoint", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        got, took = _timed_follow(genesis_path, url)
        assert got == size, (got, size)
        print(f"mirror from the origin's URL:  {size / took:8,.0f} entries/s ({took:.1f} s)",
              flush=True)
    finally:
        server.terminate()
        server.wait(30)
    got, took = _timed_follow(genesis_path, str(export))
    assert got == size, (got, size)
    print(f"catch-up from the export file: {size / took:8,.0f} entries/s ({took:.1f} s)",
          flush=True)


if __name__ == "__main__":
    main()
