"""WAL checkpoints run beside the writer, not inside its commits.  SQLite only: its ``-wal``
file and checkpointer thread are SQLite's (PostgreSQL checkpoints its own WAL)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from alexandria.rules.admission import prepare
from alexandria.service.bootstrap import Founding
from alexandria.store import wal_checkpointer
from alexandria.store.sqlite import SqliteStorage
from tests.conftest import Clock


def _claim(i: int) -> dict[str, Any]:
    return {
        "kind": "claim", "title": f"Claim {i}", "links": [], "previous": "",
        "body": {"statement": f"Statement {i} " * 40, "scope": "Tests", "assumptions": []},
    }


@contextlib.asynccontextmanager
async def _library(db: Path, founding: Founding, clock: Clock) -> AsyncIterator[SqliteStorage]:
    """An open storage with the founding's authority documents admitted."""
    storage = SqliteStorage(db, founding.genesis)
    storage.clock = clock
    await storage.open()
    try:
        for doc in founding.authority_documents():
            await storage.admit_authority(doc)
        yield storage
    finally:
        await storage.close()


async def test_admitted_pages_reach_the_database_file(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    db = tmp_path / "lib.db"
    async with _library(db, founding, clock) as storage:
        autocheckpoint = await storage.write(
            lambda conn: conn.execute("PRAGMA wal_autocheckpoint").fetchone()
        )
        assert autocheckpoint == (0,)  # the commits themselves never checkpoint
        await asyncio.sleep(0.3)
        before = db.stat().st_size
        owner = founding.participants["owner"]
        for i in range(60):
            env = owner.envelope(founding.genesis, _claim(i), clock.tick())
            await storage.admit(prepare(json.dumps(env).encode(), founding.genesis))
        for _ in range(100):  # the checkpointer copies the new pages into the database file
            if db.stat().st_size > before:
                break
            await asyncio.sleep(0.05)
        assert db.stat().st_size > before
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM log").fetchone()[0] == 62
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_the_log_is_started_over_under_sustained_admissions(
    tmp_path: Path, founding: Founding, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint beside a writer that never pauses never copies every frame; without the
    writer's catch-up the log would grow by every page ever written."""
    monkeypatch.setattr(wal_checkpointer, "RESTART_FRAMES", 256)  # 1 MiB
    db = tmp_path / "lib.db"
    wal = Path(f"{db}-wal")
    async with _library(db, founding, clock) as storage:
        owner = founding.participants["owner"]
        cands = [
            prepare(json.dumps(owner.envelope(founding.genesis, _claim(i), clock.tick())).encode(),
                    founding.genesis)
            for i in range(1500)
        ]
        largest = 0
        pending: set[asyncio.Future[Any]] = set()
        for cand in cands:  # always 64 admissions waiting: the writer never idles
            pending.add(asyncio.ensure_future(storage.admit(cand)))
            if len(pending) >= 64:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                largest = max(largest, wal.stat().st_size)
        await asyncio.gather(*pending)
    # ~15 MiB of frames went through the log (all of it stays there without the catch-up);
    # with it the log stays near RESTART_FRAMES plus what one checkpoint period adds (~5 MiB)
    assert largest < 10 * 2**20, largest
