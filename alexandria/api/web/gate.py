"""Pages take turns, and all of them together take a bounded share of the server's time.

A page costs far more than a JSON read (it reads several sections and renders a template), and a
stranger can ask for pages as fast as the connections allow.  So each server process builds one
page at a time (its reads and its rendering), and after a page that took ``t`` seconds the next
waits ``t * (1 / PAGE_SHARE - 1)`` (at most ``MAX_REST_S``): pages take at most ``PAGE_SHARE``
of the process's time, whatever is asked, and the rest stays for the JSON API and admissions.
A page that finds the turn taken waits for it, without any cost, up to ``MAX_PAGE_WAIT_S``;
with more than ``MAX_WAITING_PAGES`` already waiting, or after that wait, it is
``503 PAGES_BUSY`` with ``Retry-After``.  An idle server answers a page at once: only the next
page waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from alexandria.errors import Failed

T = TypeVar("T")

#: The most of a server process's time pages take together.
PAGE_SHARE = 0.25
#: Pages that may wait for their turn in a process; beyond, 503 at once.
MAX_WAITING_PAGES = 1024
#: How long a page waits for its turn before it is 503.
MAX_PAGE_WAIT_S = 10.0
#: The longest the next page waits after one (a page slowed by a busy database would otherwise
#: close the turn for three times as long).
MAX_REST_S = 2.0
#: What ``Retry-After`` says, in seconds.
RETRY_AFTER_S = 2


class PageGate:
    """One turn per process (``Starlette`` app) for building pages; see the module doc."""

    def __init__(self, share: float = PAGE_SHARE, max_waiting: int = MAX_WAITING_PAGES,
                 max_wait_s: float = MAX_PAGE_WAIT_S) -> None:
        self.share = share
        self.max_waiting = max_waiting
        self.max_wait_s = max_wait_s
        self.waiting = 0
        self._turn = asyncio.Lock()

    def _busy(self, why: str) -> Failed:
        return Failed(f"the server is busy with other pages ({why}): try again in"
                      f" {RETRY_AFTER_S} s", "PAGES_BUSY", retry_after=RETRY_AFTER_S)

    async def run(self, build: Callable[[], Awaitable[T]]) -> T:
        """``await build()`` in its turn."""
        if self._turn.locked():
            if self.waiting >= self.max_waiting:
                raise self._busy(f"{self.waiting} waiting")
            self.waiting += 1
            try:
                await asyncio.wait_for(self._turn.acquire(), self.max_wait_s)
            except TimeoutError:
                raise self._busy(f"none ready within {self.max_wait_s:.0f} s") from None
            finally:
                self.waiting -= 1
        else:  # the turn is free: taken at once
            await self._turn.acquire()
        start = time.monotonic()
        try:
            return await build()
        finally:
            rest = min((time.monotonic() - start) * (1 / self.share - 1), MAX_REST_S)
            asyncio.get_running_loop().call_later(rest, self._turn.release)
