"""``alexandria mirror``: a read-only replica that follows its origin's log.

The app is the library's own (same read API, same storage: ``api/app.create_app``); beside it
runs the follower (``follow.py``): once a second it asks the origin for its checkpoint, checks the
origin's consistency proof from the last checkpoint it verified, fetches the new entries,
verifies each with the code of ``alexandria verify`` and stores it with the code of an
admission, then checks and keeps the origin's signed checkpoints.  It resumes from its
database after a restart.  Writes are refused (403 ``READ_ONLY_MIRROR``, naming the origin).

If the origin ever serves an entry that does not verify, or a checkpoint inconsistent with one
the mirror verified (a fork), the mirror says which sequence, keeps everything it verified
before it, and stops (exit status 6): a replica must not keep serving a log it can no longer
vouch for; so does a page that breaks the protocol's paging (``BAD_PAGE``: a ``next`` that
does not advance would keep it asking forever).  An unreachable origin, or an answer larger
than the protocol allows for its route (``ANSWER_TOO_LARGE``, read no further than that), is
not a failure: the mirror says so once and keeps trying; once the origin has not answered for
``--stale-after`` seconds, ``/healthz`` is not ready and says why, with the lag against the
origin's last known size.  SIGTERM or SIGINT stops it within seconds (a request to a slow
origin is aborted), keeping every entry verified; it then exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

from alexandria.audit.export import Fetch, HttpSource, http_fetcher
from alexandria.audit.verify import VerificationFailed
from alexandria.errors import AlexandriaError
from alexandria.service.follow import Follower, sync_from_server
from alexandria.service.library import Library

if TYPE_CHECKING:
    from starlette.types import ASGIApp

FOLLOW_INTERVAL_S = 1.0
PROGRESS_INTERVAL_S = 2.0
#: on SIGTERM or SIGINT, open connections are given this long to finish
STOP_GRACE_S = 2


class _Reporter:
    """Progress on stderr: at most every ``PROGRESS_INTERVAL_S`` while copying, and once
    each time the mirror catches up."""

    def __init__(self, out: Callable[[str], None]) -> None:
        self.out = out
        self.last = 0.0
        self.reported: tuple[int, int] | None = None

    def copying(self, follower: Follower) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_INTERVAL_S:
            return
        self.last = now
        elapsed = time.perf_counter() - follower.started
        rate = follower.stored / elapsed if elapsed > 0 else 0.0
        self.out(f"mirror: {follower.size} of {follower.source_size} entries verified and"
                 f" stored ({rate:,.0f}/s)")

    def caught_up(self, follower: Follower, origin: str) -> None:
        seen = (follower.size, follower.checkpoint.size)
        if seen != self.reported:
            self.reported = seen
            self.out(f"mirror: caught up with {origin}: {follower.size} entries"
                     f" ({follower.stored} stored since start), checkpoint"
                     f" {follower.checkpoint.size} verified")


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def follow(library: Library, fetch: Fetch, interval: float = FOLLOW_INTERVAL_S,
                 out: Callable[[str], None] = _stderr, stop: Callable[[], None] | None = None,
                 ) -> None:
    """Follow the origin until cancelled or until a verification failure (then ``stop``)."""
    state = library.mirror
    assert state is not None
    reporter = _Reporter(out)

    def seen(f: Follower) -> None:
        """What the origin said so far, also in a round that fails half-way."""
        state.origin_size = max(state.origin_size, f.source_size)
        if isinstance(fetch, HttpSource) and fetch.answered:
            state.answered = max(state.answered, fetch.answered)

    def progress(f: Follower) -> None:
        seen(f)
        reporter.copying(f)

    follower = Follower(library.storage, progress)
    await follower.load()
    try:
        while True:
            try:
                size = await sync_from_server(follower, fetch)
            except VerificationFailed as exc:
                seen(follower)
                state.failure = exc
                state.error = f"{exc.message} [{exc.code}]"
                out(f"mirror: stopped following {state.origin}: {state.error}; the"
                    f" {follower.size} entries verified before it are kept")
                if stop is not None:
                    stop()
                return
            except (AlexandriaError, OSError, ValueError, KeyError, TypeError) as exc:
                seen(follower)
                code = f" [{exc.code}]" if isinstance(exc, AlexandriaError) else ""
                text = f"{exc}{code}"
                if text != state.trouble:  # once, not once a second
                    out(f"mirror: cannot follow {state.origin} now ({text}); retrying")
                state.trouble = text
            else:
                seen(follower)
                if not isinstance(fetch, HttpSource):
                    state.answered = time.monotonic()
                state.trouble = None
                state.origin_size = max(size, state.origin_size)
                if follower.size >= size:
                    state.synced = True
                    reporter.caught_up(follower, state.origin)
            await asyncio.sleep(interval)
    except asyncio.CancelledError:
        out(f"mirror: stopped: {follower.size} entries verified and stored are kept"
            f" (checkpoint {follower.checkpoint.size} verified)")
        raise


def _stop_server() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


@contextlib.asynccontextmanager
async def following(library: Library) -> AsyncIterator[None]:
    """Run the follower beside the app of a mirror (a no-op for any other library)."""
    state = library.mirror
    if state is None:
        yield
        return
    fetch, close = http_fetcher(state.origin)
    task = asyncio.get_running_loop().create_task(
        follow(library, fetch, stop=state.stop or _stop_server))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        close()


def run_mirror(library: Library, app: ASGIApp, host: str, port: int) -> str | None:
    """Serve ``app``, the mirror's read API (whose lifespan runs ``following``), until stopped,
    or until the follower stops at something that does not verify (``library.mirror.failure``
    then says what).  Returns the name of the signal that stopped it (None when the follower
    did)."""
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, stopped by SIGTERM or SIGINT without raising the signal again
        once stopped (uvicorn does, so the process would end by the signal: status 143 or
        130), so that a stop asked for exits 0.  A second signal stops without waiting for
        open connections.  Signals reach the main thread, where ``run`` runs."""

        signal_name: str | None = None

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            def handle(sig: int, _frame: FrameType | None) -> None:
                self.signal_name = self.signal_name or signal.Signals(sig).name
                if self.should_exit:
                    self.force_exit = True
                self.should_exit = True

            original = {sig: signal.signal(sig, handle)
                        for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    state = library.mirror
    assert state is not None
    server = Server(uvicorn.Config(
        app, host=host, port=port, log_level="warning", server_header=False,
        access_log=False, proxy_headers=False, timeout_graceful_shutdown=STOP_GRACE_S,
    ))

    def stop() -> None:
        server.should_exit = True  # a graceful shutdown; the command then exits 6

    state.stop = stop
    server.run()
    return server.signal_name
