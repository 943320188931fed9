"""Admissions over plain HTTP against live servers, and the log's invariant after them."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from alexandria.service.bootstrap import Founding
from alexandria.store.backends import open_readonly
from tests.support.liveserver import Server


def gapless_log(db: Path | str) -> list[int]:
    """The log's sequences, checked gapless (and a SQLite file checked intact)."""
    if isinstance(db, Path):
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with open_readonly(db) as ro:
        sequences = [int(r[0]) for r in ro.execute("SELECT sequence FROM log ORDER BY sequence")]
    assert sequences == list(range(1, len(sequences) + 1))
    return sequences


def admit_authorities(url: str, founding: Founding) -> None:
    for doc in founding.authority_documents():
        r = httpx.post(f"{url}/api/authority", json=doc)
        assert r.status_code in (200, 201), r.text


def claim_revision(i: int, previous: str = "") -> dict[str, Any]:
    return {
        "kind": "claim",
        "title": f"Claim revision {i}",
        "body": {"statement": f"Statement {i}", "scope": "Everything", "assumptions": []},
        "links": [],
        "previous": previous,
    }


def post_at(url: str, body: bytes, start: float, out: Any) -> None:
    while time.time() < start:
        time.sleep(0.0005)
    with httpx.Client(timeout=60) as client:
        r = client.post(f"{url}/api/entries", content=body)
    out.put((r.status_code, r.json()))


def kill_while_streaming(server: Server, stream: Callable[[int], None], streams: int,
                         stop: threading.Event, enough: Callable[[], bool],
                         seconds: float = 120) -> None:
    """Run ``stream(i)`` in ``streams`` threads, SIGKILL ``server`` (no shutdown handlers run)
    once ``enough()`` holds or ``seconds`` have passed, then set ``stop`` and join them."""
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    deadline = time.time() + seconds
    while not enough() and time.time() < deadline:
        time.sleep(0.01)
    server.kill()
    stop.set()
    for t in threads:
        t.join()
