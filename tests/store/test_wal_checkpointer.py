"""WAL checkpoints run beside the writer, not inside its commits.  SQLite only: its ``-wal``
file and checkpointer thread are SQLite's (PostgreSQL checkpoints its own WAL)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from alexandria.rules.admission import prepare
from alexandria.service.bootstrap import Founding
from alexandria.store import wal_checkpointer
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.sqlite import sqlite_storage
from tests.support.library import Clock


def _claim(i: int) -> dict[str, Any]:
    return {
        "kind": "claim", "title": f"Claim {i}", "links": [], "previous": "",
        "body": {"statement": f"Statement {i} " * 40, "scope": "Tests", "assumptions": []},
    }


@contextlib.asynccontextmanager
async def _library(db: Path, founding: Founding, clock: Clock) -> AsyncIterator[LedgerStorage]:
    """An open storage with the founding's authority documents admitted."""
    storage = sqlite_storage(db, founding.genesis)
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


def _wal_writer(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t(x BLOB)")
    return conn


def _write(conn: sqlite3.Connection, rows: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO t VALUES (randomblob(3000))", [()] * rows)
    conn.execute("COMMIT")


def test_a_catch_up_waits_for_the_checkpointer_only_when_the_log_is_overdue(
    tmp_path: Path,
) -> None:
    """While the checkpointer copies, the writer's catch-up gives up at once (it tries again
    after its next transaction) unless the log has outgrown ``LIMIT_FRAMES``: then it waits
    for that copy to end and finishes the checkpoint, and the next transaction starts the log
    over instead of appending to it."""
    db = tmp_path / "lib.db"
    wal = Path(f"{db}-wal")
    writer = _wal_writer(db)
    checkpointer = wal_checkpointer.WalCheckpointer(str(db))
    try:
        _write(writer, 200)
        grown = wal.stat().st_size
        checkpointer.catch_up = True
        with checkpointer._copying:  # the checkpointer is copying
            checkpointer.catch_up_on(writer)  # returns at once: nothing copied
            assert checkpointer.catch_up
            _write(writer, 200)  # appended: the log was not fully copied
            assert wal.stat().st_size > grown
            grown = wal.stat().st_size
            checkpointer.overdue = True
            waiting = threading.Thread(target=checkpointer.catch_up_on, args=(writer,))
            waiting.start()
            waiting.join(0.3)
            assert waiting.is_alive()  # it waits for the copy to end
        waiting.join(5)
        assert not waiting.is_alive()
        assert not checkpointer.catch_up and not checkpointer.overdue
        _write(writer, 100)  # the log starts over: its file does not grow
        assert wal.stat().st_size == grown
        assert writer.execute("SELECT count(*) FROM t").fetchone() == (500,)
    finally:
        checkpointer.close()
        writer.close()


def test_the_checkpointer_marks_a_log_past_the_limit_overdue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wal_checkpointer, "RESTART_FRAMES", 100)
    monkeypatch.setattr(wal_checkpointer, "LIMIT_FRAMES", 300)
    db = tmp_path / "lib.db"
    writer = _wal_writer(db)
    checkpointer = wal_checkpointer.WalCheckpointer(str(db))
    try:
        # a row of 3 KB per 4 KiB page; the log starts over at each write (the checkpointer
        # copied everything before it), so it holds that write's frames: ~50, then ~400
        for rows, expected in ((50, (False, False)), (400, (True, True))):
            _write(writer, rows)
            checkpointer.kick()
            for _ in range(250):
                time.sleep(0.02)
                if (checkpointer.catch_up, checkpointer.overdue) == expected \
                        and not checkpointer._kick.is_set():
                    break
            time.sleep(0.2)  # the checkpoint of these few frames is long over
            assert (checkpointer.catch_up, checkpointer.overdue) == expected
    finally:
        checkpointer.close()
        writer.close()


async def test_the_writer_keeps_a_log_file_longer_than_the_longest_log(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    """When the log starts over, the writer's connection cuts the file back only to
    ``JOURNAL_SIZE_LIMIT``, above a log of ``LIMIT_FRAMES`` and a large transaction: a file cut
    back to a small size regrows by every bulk transaction, block by new block."""
    async with _library(tmp_path / "lib.db", founding, clock) as storage:
        limit = await storage.write(
            lambda conn: conn.execute("PRAGMA journal_size_limit").fetchone()
        )
    assert limit == (wal_checkpointer.JOURNAL_SIZE_LIMIT,)
    assert limit[0] >= 4096 * wal_checkpointer.LIMIT_FRAMES + 256 * 2**20
