"""What a storage failure means for a client (``store/outage.classify``), and one log line per
episode (``store/outage.Outages``).  The live fault injection is ``tests/e2e/test_outages.py``."""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
import time

import orjson
import psycopg
import pytest
from psycopg_pool import PoolTimeout

from alexandria.api.status import retry_after, status_of
from alexandria.errors import DiskFull, Failed, StorageUnavailable
from alexandria.store.outage import Outages, classify
from tests.support.admission import space
from tests.support.library import Api


def _raised_from(cause: BaseException) -> sqlite3.OperationalError:
    """As ``PgConnection`` raises a driver's error: sqlite3's, the driver's as its cause."""
    try:
        raise sqlite3.OperationalError(str(cause)) from cause
    except sqlite3.OperationalError as exc:
        return exc


def _sqlite_full() -> sqlite3.Error:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = 13
    return exc


@pytest.mark.parametrize(("cause", "code"), [
    (_sqlite_full(), "DISK_FULL"),
    (OSError(errno.ENOSPC, "No space left on device"), "DISK_FULL"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "DISK_FULL"),
    (_raised_from(psycopg.errors.DiskFull("could not extend file")), "DISK_FULL"),
    (_raised_from(psycopg.OperationalError("server closed the connection unexpectedly")),
     "STORAGE_UNAVAILABLE"),
    (psycopg.OperationalError("connection failed: No such file or directory"),
     "STORAGE_UNAVAILABLE"),
    (_raised_from(psycopg.errors.AdminShutdown("terminating connection")),
     "STORAGE_UNAVAILABLE"),
    (_raised_from(psycopg.errors.CannotConnectNow("the database system is starting up")),
     "STORAGE_UNAVAILABLE"),
    (PoolTimeout("couldn't get a connection after 5.00 sec"), "STORAGE_UNAVAILABLE"),
    (sqlite3.OperationalError("disk I/O error"), "STORAGE_FAILED"),
    (_raised_from(psycopg.errors.UniqueViolation("duplicate key")), "STORAGE_FAILED"),
    (None, "STORAGE_FAILED"),
])
def test_classify(cause: BaseException | None, code: str) -> None:
    error = classify(cause)
    assert error.code == code and status_of(error) == 503
    assert (retry_after(error) is not None) == (code != "STORAGE_FAILED")
    if code == "DISK_FULL":
        assert isinstance(error, DiskFull)
    if code == "STORAGE_UNAVAILABLE":
        assert isinstance(error, StorageUnavailable)


def test_one_log_line_per_episode(caplog: pytest.LogCaptureFixture) -> None:
    outages = Outages("library.db")
    caplog.set_level(logging.WARNING, "alexandria.storage")
    cause = _sqlite_full()
    for _ in range(50):
        outages.failed("writes", classify(cause), cause)
    episode = outages.failing("writes")
    assert episode is not None and episode.refused == 50 and episode.error.code == "DISK_FULL"
    outages.ok("writes")
    outages.ok("writes")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "writes failing (DISK_FULL)" in lines[0] and "database or disk is full" in lines[0]
    assert "writes recovered after" in lines[1] and "50 requests refused" in lines[1]
    assert not any(r.exc_info for r in caplog.records)
    assert outages.current() == {}


def test_another_kind_of_failure_is_another_episode(caplog: pytest.LogCaptureFixture) -> None:
    outages = Outages("library.db")
    caplog.set_level(logging.WARNING, "alexandria.storage")
    outages.failed("reads", StorageUnavailable("down"), None)
    outages.failed("reads", DiskFull("full"), None)
    outages.failed("writes", Failed("storage failed", "STORAGE_FAILED"),
                   sqlite3.OperationalError("disk I/O error"))
    assert [r.getMessage().split(": ", 1)[1][:22] for r in caplog.records] == [
        "reads failing (STORAGE", "reads failing (DISK_FU", "writes failing (STORAG"]
    # a failure nobody knows: its traceback, once
    assert caplog.records[2].exc_info is not None


def test_a_relayed_failure_is_not_logged_twice(caplog: pytest.LogCaptureFixture) -> None:
    """An HTTP worker hears of the writer process's outage from its answers: the writer
    process logged it; the worker only remembers it for /healthz."""
    outages = Outages("library.db")
    caplog.set_level(logging.WARNING, "alexandria.storage")
    outages.failed("writes", DiskFull("full"), announce=False)
    assert outages.failing("writes") is not None
    outages.ok("writes")
    assert caplog.records == []


async def test_the_admission_deadline_in_process(api: Api) -> None:
    """The in-process writer busy past the deadline (a write transaction that sleeps, on
    either backend): the admission is 503 ``ADMISSION_TIMEOUT`` with ``Retry-After``,
    ``/healthz`` not ready; once the writer is free the admission it had queued is committed,
    the library is ready again, and the same bytes sent again are answered 200 with it."""
    api.library.admission_deadline_s = 0.3
    await api.publish("owner", space())
    blocker = asyncio.ensure_future(api.library.storage.write(lambda conn: time.sleep(1.5)))
    await asyncio.sleep(0.05)  # the writer is in that transaction
    envelope = orjson.dumps(api.envelope("owner", space("Late")))
    started = time.monotonic()
    r = await api.post(envelope)
    assert 0.25 < time.monotonic() - started < 1.4
    assert r.status_code == 503 and r.json()["code"] == "ADMISSION_TIMEOUT", r.text
    assert r.headers["Retry-After"] == "5"
    health = await api.client.get("/healthz")
    assert health.status_code == 503
    assert any("admissions stalled" in reason for reason in health.json()["reasons"])
    await blocker
    for _ in range(50):
        health = await api.client.get("/healthz")
        if health.status_code == 200:
            break
        await asyncio.sleep(0.05)
    assert health.status_code == 200, health.text
    again = await api.post(envelope)
    assert again.status_code == 200, again.text  # the first attempt was stored
