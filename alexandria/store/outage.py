"""Storage outages: what a failure of the database means for a client, and one log line per
episode.

A failure of the storage reaches the client as a typed ``Failed`` (503) that says what happened
(``classify``): ``STORAGE_UNAVAILABLE`` when the database cannot be reached (PostgreSQL
stopped, restarting, its connections killed), ``DISK_FULL`` when its file system is full
(SQLite's ``SQLITE_FULL``, ``ENOSPC``/``EDQUOT``, PostgreSQL's SQLSTATE 53100), each with
``Retry-After`` (``api.status.HTTP``), or ``STORAGE_FAILED`` for anything else.

An outage fails every request until it ends, so the log hears of it once (``Outages``): one
warning when an episode begins (its cause in one line), one line when it ends (how long it
lasted, how many requests it refused); never a traceback per request.  What is failing now is
what ``/healthz`` reports (``service/library.py``).
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass

from alexandria.errors import DiskFull, Failed, StorageUnavailable

log = logging.getLogger("alexandria.storage")

SQLITE_FULL = 13
#: SQLSTATEs of PostgreSQL meaning the server cannot be used right now: the connection
#: class (08), and the operator's interventions (admin shutdown, crash shutdown, cannot
#: connect now: starting or stopping)
_UNREACHABLE_STATES = ("57P01", "57P02", "57P03")
_PG_DISK_FULL = "53100"


def _chain(exc: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out and len(out) < 16:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(exc, sqlite3.Error):
        if getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL:
            return True
        if "database or disk is full" in str(exc):
            return True
    return getattr(exc, "sqlstate", None) == _PG_DISK_FULL


def _unreachable(exc: BaseException) -> bool:
    module = type(exc).__module__
    if module.startswith("psycopg_pool"):
        return type(exc).__name__ == "PoolTimeout"
    if not module.startswith("psycopg"):
        return False
    state = getattr(exc, "sqlstate", None)
    if state is None:  # no answer from a server: connecting failed, or the connection broke
        return type(exc).__name__ in ("OperationalError", "InterfaceError")
    return bool(state.startswith("08") or state in _UNREACHABLE_STATES)


def outage_of(exc: BaseException | None) -> Failed | None:
    """The typed outage ``exc`` (or an exception it was raised from) is, or None when it is
    not one of the outages this module knows."""
    for cause in _chain(exc):
        if isinstance(cause, (DiskFull, StorageUnavailable)):
            return cause
        if _disk_full(cause):
            return DiskFull(
                "the disk holding the library's data is full: nothing was stored; retry the"
                " same request later (the operator must free space)")
        if _unreachable(cause):
            return StorageUnavailable(
                "the database cannot be reached: nothing was stored; retry the same request"
                " later")
    return None


def classify(exc: BaseException | None) -> Failed:
    """What a client hears when the storage failed with ``exc``: a typed outage, or
    ``STORAGE_FAILED`` (the cause goes to the log, not to them)."""
    return outage_of(exc) or Failed("storage failed", "STORAGE_FAILED")


def describe(exc: BaseException | None) -> str:
    """``exc``'s innermost cause in one line, for the log."""
    chain = _chain(exc)
    if not chain:
        return "unknown cause"
    inner = chain[-1]
    text = " ".join(str(inner).split())
    return f"{type(inner).__name__}: {text}"[:500]


@dataclass
class Episode:
    """An outage in progress on one path (``writes`` or ``reads``)."""

    error: Failed
    cause: str
    since: float  # time.monotonic()
    refused: int = 0
    announced: bool = True  # its start was logged (so is its end)


class Outages:
    """The outages of one storage, by path; thread-safe (the writer and reader threads
    report, the event loop asks)."""

    PATHS = ("writes", "reads")

    def __init__(self, name: str) -> None:
        self.name = name  # the library, in log lines (never a password)
        self._lock = threading.Lock()
        self._episodes: dict[str, Episode] = {}

    def failed(self, path: str, error: Failed, cause: BaseException | None = None,
               announce: bool = True) -> None:
        """``path`` failed with ``error`` (``cause``: the exception behind it).  The first
        failure of an episode is logged; a failure of another kind starts a new episode.
        ``announce=False``: the failure was reported elsewhere (the admission writer process
        logs its own)."""
        with self._lock:
            episode = self._episodes.get(path)
            if episode is not None and episode.error.code == error.code:
                episode.refused += 1
                return
            self._episodes[path] = Episode(error, describe(cause), time.monotonic(), 1,
                                           announce)
        if announce:
            # an outage it knows in one line; anything else with its traceback, once
            log.warning("%s: %s failing (%s): %s; answering 503 %s until it recovers",
                        self.name, path, error.code, describe(cause), error.code,
                        exc_info=cause if error.code == "STORAGE_FAILED" else None)

    def ok(self, path: str) -> None:
        """``path`` worked: the end of its episode, if one was in progress."""
        if path not in self._episodes:  # the common case, without the lock
            return
        with self._lock:
            episode = self._episodes.pop(path, None)
        if episode is not None and episode.announced:
            log.warning("%s: %s recovered after %.1f s (%s; %d requests refused)", self.name,
                        path, time.monotonic() - episode.since, episode.error.code,
                        episode.refused)

    def current(self) -> dict[str, Episode]:
        with self._lock:
            return dict(self._episodes)

    def failing(self, path: str) -> Episode | None:
        return self._episodes.get(path)
