"""Races between processes and crashes: the write path's promises under real servers."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.core.timestamps import format_ms, now_ms
from alexandria.service.bootstrap import Founding
from tests.support.live import (
    admit_authorities,
    claim_revision,
    gapless_log,
    kill_while_streaming,
    post_at,
)
from tests.support.liveserver import NewDb, Server, serving, write_library_files


# workers=2: server a is itself two HTTP processes and a writer process
@pytest.mark.parametrize("workers", [1, 2])
def test_concurrent_revisions_of_one_head_across_processes(
    tmp_path: Path, founding: Founding, workers: int, new_db: NewDb
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    db = new_db(tmp_path / "library.db")
    owner = founding.participants["owner"]
    base = now_ms() - 60_000
    # two independent servers on the same database
    with serving(genesis, db, log_key, workers) as a, serving(genesis, db, log_key) as b:
        admit_authorities(a.url, founding)
        first = owner.envelope(founding.genesis, claim_revision(0), format_ms(base))
        r = httpx.post(f"{a.url}/api/entries", content=json.dumps(first).encode())
        assert r.status_code == 201
        head = r.json()["id"]
        n = 12
        bodies = [
            json.dumps(
                owner.envelope(founding.genesis, claim_revision(i, head), format_ms(base + i))
            ).encode()
            for i in range(1, n + 1)
        ]
        q: Any = multiprocessing.Queue()
        start = time.time() + 1.5
        procs = [
            multiprocessing.Process(target=post_at, args=((a, b)[i % 2].url, body, start, q))
            for i, body in enumerate(bodies)
        ]
        for p in procs:
            p.start()
        results = [q.get(timeout=60) for _ in procs]
        for p in procs:
            p.join()
        winners = [body for status, body in results if status == 201]
        losers = [body for status, body in results if status != 201]
        assert len(winners) == 1, results
        assert all(status == 409 for status, _ in results if status != 201)
        assert {body["code"] for body in losers} == {"HEAD_CONFLICT"}
        assert {body["details"]["head"] for body in losers} == {winners[0]["id"]}
        head_now = httpx.get(f"{b.url}/api/entries/{head}/head").json()
        assert head_now["id"] == winners[0]["id"]
    sequences = gapless_log(db)
    assert len(sequences) == 2 + 1 + 1


@pytest.mark.parametrize("workers", [1, 2])
def test_acknowledged_admissions_survive_sigkill(
    tmp_path: Path, founding: Founding, workers: int, new_db: NewDb
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    db = new_db(tmp_path / "library.db")
    peer = founding.participants["peer"]
    base = now_ms() - 600_000
    bodies = [
        json.dumps(peer.envelope(founding.genesis, claim_revision(i), format_ms(base + i))).encode()
        for i in range(3000)
    ]
    acknowledged: list[str] = []
    lock = threading.Lock()
    server = Server(genesis, db, log_key, workers=workers)
    try:
        admit_authorities(server.url, founding)
        stop = threading.Event()

        def stream(offset: int) -> None:
            with httpx.Client(timeout=10) as client:
                for body in bodies[offset::4]:
                    if stop.is_set():
                        return
                    try:
                        r = client.post(f"{server.url}/api/entries", content=body)
                    except httpx.HTTPError:
                        return
                    if r.status_code == 201:
                        with lock:
                            acknowledged.append(r.json()["id"])

        kill_while_streaming(server, stream, 4, stop, lambda: len(acknowledged) >= 200)
    finally:
        server.stop()
    assert len(acknowledged) >= 200
    with serving(genesis, db, log_key) as again, httpx.Client() as client:
        for rev in acknowledged:
            assert client.get(f"{again.url}/api/entries/{rev}").status_code == 200
    assert len(gapless_log(db)) >= 2 + len(acknowledged)
