"""``POST /api/personal`` requests per second, in process (httpx over ASGI, no sockets).

    .venv/bin/python -m bench.personal [--requests 2000] [--concurrency 32]

Every personal request, reads included, is a write transaction (a read records its nonce), so
this measures the group-commit writer under personal traffic: reads, and compare-and-set writes
of full lists (128 + 128 roots, the largest state) chained one after another by each of
``--concurrency`` participants.  Envelopes are signed before the clock starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from alexandria.api.app import create_app
from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.timestamps import now
from alexandria.rules.personal import MAX_ROOTS
from alexandria.service.bootstrap import Participant, found_library
from alexandria.service.library import Library
from alexandria.store.sqlite import sqlite_storage


def _personal(f: Any, p: Participant, kind: str, body: Any, previous: str = "") -> bytes:
    env = p.envelope(f.genesis, {"kind": kind, "title": "", "body": body, "links": [],
                                 "previous": previous}, now())
    return json.dumps(env).encode()


async def run(requests: int, concurrency: int, tmp: Path) -> None:
    f = found_library(seed=b"bench-personal")
    people = [f.enroll(f"p{i}") for i in range(concurrency)]
    storage = sqlite_storage(tmp / "lib.db", f.genesis)
    app = create_app(Library(f.genesis, storage, f.log_key))
    transport = httpx.ASGITransport(app=app)
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://bench") as client):
        for doc in f.authority_documents():
            (await client.post("/api/authority", json=doc)).raise_for_status()
        roots = []
        for i in range(MAX_ROOTS):
            env = people[0].envelope(f.genesis, {"kind": "space", "title": f"Space {i}",
                                                 "body": {"summary": "s"}, "links": [],
                                                 "previous": ""}, now())
            r = await client.post("/api/entries", json=env)
            assert r.status_code == 201, r.text
            roots.append(r.json()["id"])

        per = max(1, requests // concurrency)
        reads = [[_personal(f, p, "personal-read", {"nonce": secrets.token_hex(32)})
                  for _ in range(per)] for p in people]
        chains: list[list[bytes]] = []
        for p in people:
            chain, previous = [], ""
            for i in range(per):
                body = {"following": roots[i % 2:] + roots[: i % 2], "saved": roots[::-1]}
                data = _personal(f, p, "personal-state", body, previous)
                previous = sha256_hex(canonical(json.loads(data)["record"]))
                chain.append(data)
            chains.append(chain)

        async def lane(bodies: list[bytes], expect: int) -> None:
            for b in bodies:
                r = await client.post("/api/personal", content=b)
                assert r.status_code == expect, r.text

        for name, lanes, expect in (("personal-read", reads, 200),
                                    ("personal-state 128+128", chains, 201)):
            start = time.perf_counter()
            await asyncio.gather(*(lane(bodies, expect) for bodies in lanes))
            elapsed = time.perf_counter() - start
            total = sum(len(x) for x in lanes)
            print(f"{name:24} {total:6d} requests  {total / elapsed:8.0f}/s"
                  f"  {elapsed / total * 1e3:6.2f} ms each (wall, {concurrency} concurrent)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run(args.requests, args.concurrency, Path(d)))


if __name__ == "__main__":
    main()
