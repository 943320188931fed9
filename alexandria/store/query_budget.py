"""The read connections' per-query time budget: one slow read (a search of common words, a
page of a deep discussion) holds a reader for at most ``budget`` seconds, then is stopped and
answered ``QUERY_TIMEOUT`` (503, ``Retry-After``); the connection serves the next read.

SQLite: a progress handler on each read connection looks at the clock every
``PROGRESS_STEPS`` virtual-machine instructions of a statement and interrupts it once the read
function that runs it has used its budget (counted from the function's start).
PostgreSQL: ``statement_timeout`` on each read session (each statement).  ``None`` means no
budget (the offline commands); ``serve --query-timeout`` sets it, ``DEFAULT_S`` by default.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from alexandria.errors import QueryTimeout

#: the server's budget when the operator names none (``serve --query-timeout``)
DEFAULT_S = 2.0
#: SQLite virtual-machine instructions between two looks at the clock: a few milliseconds of
#: work.  The handler is Python, so each look takes the GIL from the event loop: a read that
#: does less (nearly all of them: a page, a lookup) never calls it, a long one a few hundred
#: times a second, and is stopped within milliseconds of its budget
PROGRESS_STEPS = 100_000


def timed_out(budget_s: float) -> QueryTimeout:
    return QueryTimeout(
        f"the query took longer than this server allows ({budget_s:g} s) and was stopped;"
        " try again later, or ask for less", budget_ms=math.ceil(budget_s * 1000),
        retry_after=max(1, math.ceil(budget_s)))


class Deadlines:
    """Each reader thread's deadline; ``handler`` is the read connections' progress handler."""

    def __init__(self) -> None:
        self._local = threading.local()

    def handler(self) -> int:
        """Nonzero (SQLite then interrupts the statement) once this thread's deadline passed."""
        deadline: float | None = getattr(self._local, "deadline", None)
        return 1 if deadline is not None and time.monotonic() > deadline else 0

    @contextmanager
    def running(self, budget_s: float | None) -> Iterator[None]:
        """A read function runs inside, with ``budget_s`` seconds (``None``: no limit); a
        statement interrupted by ``handler`` is raised as ``QueryTimeout``."""
        if budget_s is None:
            yield
            return
        self._local.deadline = time.monotonic() + budget_s
        try:
            yield
        except sqlite3.OperationalError as exc:
            if str(exc) == "interrupted" and self.handler():
                raise timed_out(budget_s) from exc
            raise
        finally:
            self._local.deadline = None


def statement_timeout_ms(budget_s: float | None) -> int:
    """PostgreSQL's ``statement_timeout`` for ``budget_s`` (0: none)."""
    return 0 if budget_s is None else max(1, math.ceil(budget_s * 1000))
