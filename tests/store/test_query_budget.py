"""Each read has a time budget (``store/query_budget.py``): a read that runs past it is stopped
and answered 503 ``QUERY_TIMEOUT`` with ``Retry-After``, and the reader it held serves the next
read, on both backends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from alexandria.api.status import status_of
from alexandria.errors import QueryTimeout
from alexandria.service.bootstrap import Founding
from alexandria.store.backends import storage_for
from alexandria.store.protocol import READERS
from tests.support.liveserver import NewDb, serving, write_library_files

#: a read that runs for minutes on either backend unless it is stopped
SLOW = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000000)"
        " SELECT count(*) FROM c")


async def test_a_read_past_its_budget_is_stopped_and_the_readers_serve_on(
    db: str | Path, founding: Founding
) -> None:
    storage = storage_for(db, founding.genesis)
    await storage.open()
    try:
        storage.query_timeout_s = 0.2
        started = time.monotonic()
        with pytest.raises(QueryTimeout) as caught:
            await storage.read(lambda conn: conn.execute(SLOW).fetchone())
        assert time.monotonic() - started < 10
        error = caught.value
        assert status_of(error) == 503
        assert error.code == "QUERY_TIMEOUT"
        assert error.details == {"budget_ms": 200, "retry_after": 1}
        # as many slow reads at once as there are readers: every one stopped, and then every
        # reader answers (none left in a transaction or interrupted)
        slow = [storage.read(lambda conn: conn.execute(SLOW).fetchone()) for _ in range(READERS)]
        results = await asyncio.gather(*slow, return_exceptions=True)
        assert all(isinstance(r, QueryTimeout) for r in results), results
        fast = [storage.read(lambda conn: conn.execute("SELECT 1").fetchone()[0])
                for _ in range(READERS * 3)]
        assert await asyncio.gather(*fast) == [1] * READERS * 3

        # a read function that began a snapshot is stopped the same way
        def in_snapshot(conn: Any) -> Any:
            conn.execute("BEGIN")
            return conn.execute(SLOW).fetchone()

        with pytest.raises(QueryTimeout):
            await storage.read(in_snapshot)
        assert await storage.log_size() == 0
        # no budget: the offline commands' storage
        storage.query_timeout_s = None
        assert await storage.read(lambda conn: conn.execute(
            "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000)"
            " SELECT count(*) FROM c").fetchone()[0]) == 1000
    finally:
        await storage.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_live_server_answers_a_held_read_503_and_serves_on(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    """A read held up past ``serve --query-timeout`` (here: by a table locked elsewhere) is
    answered 503 QUERY_TIMEOUT with Retry-After; once the lock is gone, every reader answers."""
    genesis, log_key = write_library_files(founding, tmp_path)
    url = str(new_db(tmp_path / "lib.db"))
    missing = "ab" * 32
    with serving(genesis, url, log_key, extra=("--query-timeout", "0.3")) as server:
        assert httpx.get(f"{server.url}/api/entries/{missing}").status_code == 404
        with psycopg.connect(url) as locker:
            locker.execute("LOCK TABLE revisions IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            r = httpx.get(f"{server.url}/api/entries/{missing}", timeout=30)
            assert time.monotonic() - started < 10
            assert r.status_code == 503, r.text
            assert r.json()["code"] == "QUERY_TIMEOUT"
            assert r.json()["details"]["budget_ms"] == 300
            assert r.headers["retry-after"] == "1"
            locker.rollback()
        for _ in range(READERS * 3):
            r = httpx.get(f"{server.url}/api/entries/{missing}")
            assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_REVISION"


def test_a_query_timeout_that_is_not_a_duration_is_refused(tmp_path: Path) -> None:
    from tests.support.cli import cli

    for bad in ("-1", "nan", "inf"):
        r = cli("serve", "--port", "1", "--query-timeout", bad, expect=2, cwd=tmp_path)
        assert "--query-timeout" in r.stderr
