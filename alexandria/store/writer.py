"""The group-commit writer: one thread per storage runs every write of the process, whatever is
queued together in one write transaction, and resolves each job's future once that transaction
is durable.

A job is one function run over its items in order (one item for a single admission or a
``write``; every candidate of ``admit_many``; every entry of a replay).  The rerun policy is
written here once, for all of them:

- **checks first**: a job whose function raises its refusals (``Refused``) before it writes
  anything runs with no savepoint at all (a savepoint copies
  every page it is the first to change into SQLite's sub-journal, the largest single cost of a
  bulk load); a refusal is that item's answer;
- **else a savepoint per item**: any other job, and every job when the batch runs again, runs
  each item in a savepoint of its own, so that its failure undoes only itself;
- a checks-first item failing in a way it did not plan for (a bug, an input some check missed)
  may have written part of its rows: the transaction is rolled back and the batch runs once
  more, every item in its own savepoint, so that item fails alone and every other is answered
  as if it had never been there (nothing in the batch had been acknowledged).  A failure of the
  database itself (``outage.outage_of``) fails the whole batch instead: a rerun would meet it
  again.

With several server processes (or PostgreSQL nodes) on one database, the backend's ``begin``
makes the write transaction exclusive, so every check and every insert of a batch are atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from alexandria.errors import AlexandriaError, Failed, Refused
from alexandria.store import log_floor
from alexandria.store.interface import Transaction
from alexandria.store.outage import Outages, classify, outage_of
from alexandria.store.protocol import WriteBackend

T = TypeVar("T")
log = logging.getLogger(__name__)
BATCH_LIMIT = 256  # jobs run in one write transaction at most


class BatchAborted(Exception):
    """The write transaction was rolled back; ``__cause__`` says why."""


def only(outcomes: list[Any]) -> Any:
    """The answer of a job of one item: its result, or its exception raised."""
    outcome = outcomes[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


@dataclass
class Job:
    """``run`` applied to each of ``items`` in order, inside one write transaction; ``answer``
    turns the outcomes (per item run: its result or its exception) into the future's result, or
    raises what the future raises.

    ``checks_first``: ``run`` raises its refusals before it writes anything (see the module).
    ``stops``: the items after the first that fails are not run (a replay's entries).
    ``revisions``: the revision ids ``run`` will ask ``StateView.admitted`` about (the backend's
    ``absent``).  ``appends``: ``run`` appends to the log, refused on a log that is behind or a
    fork of the published checkpoint (``store/log_floor.py``).  ``keeps_memory``: ``run``
    writes nothing the writer's memory holds (a checkpoint), so the memory outlives it here
    and, on PostgreSQL, in every other node's writer."""

    run: Callable[[sqlite3.Connection, Any], Any]
    items: Sequence[Any]
    answer: Callable[[list[Any]], Any]
    future: asyncio.Future[Any]
    checks_first: bool = False
    stops: bool = False
    revisions: tuple[str, ...] = ()
    appends: bool = False
    keeps_memory: bool = False


class Writer:
    """The writer thread of one storage, over its backend's write connection.  ``observe``,
    if set, is called on the writer thread after each write transaction, before its answers
    are handed over (``Transaction``)."""

    def __init__(self, backend: WriteBackend, outages: Outages) -> None:
        self.backend = backend
        self.outages = outages
        self.conn: sqlite3.Connection | None = None  # set by the storage once connected
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._ended: asyncio.Future[None] | None = None  # resolved when the thread ends
        self._floor_checked = -1  # the memory generation ``_floor_problem`` was learnt in
        self._floor_problem: Failed | None = None
        self.observe: Callable[[Transaction], None] | None = None

    @property
    def running(self) -> bool:
        """False once the writer thread has ended (it runs from the first job until
        ``close``), or before the write connection was opened."""
        return self.conn is not None and (self._ended is None or not self._ended.done())

    def submit(
        self, run: Callable[[sqlite3.Connection, Any], Any], items: Sequence[Any],
        answer: Callable[[list[Any]], T], *, checks_first: bool = False, stops: bool = False,
        revisions: tuple[str, ...] = (), appends: bool = False, keeps_memory: bool = False,
    ) -> asyncio.Future[T]:
        """Queue a job (``Job``); its future resolves once its transaction is durable."""
        loop = asyncio.get_running_loop()
        if self._ended is None:
            conn = self.conn
            assert conn is not None, "storage is not open"
            # the writer thread holds the write connection until close()
            self._ended = loop.create_future()
            threading.Thread(target=self._write_forever, args=(conn, loop, self._ended),
                             name="alexandria-writer", daemon=True).start()
        fut: asyncio.Future[T] = loop.create_future()
        self._jobs.put(Job(run, items, answer, fut, checks_first, stops, revisions, appends,
                           keeps_memory))
        return fut

    async def close(self) -> None:
        """End the thread after the jobs already queued."""
        if self._ended is not None:
            self._jobs.put(None)
            with contextlib.suppress(Exception):
                await self._ended
            self._ended = None

    # --- the thread --------------------------------------------------------------------------

    def _write_forever(self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop,
                       ended: asyncio.Future[None]) -> None:
        """Take everything queued, run it as one batch, hand the results to the event loop,
        and go straight on with whatever queued meanwhile (no round trip through the event
        loop between two batches)."""
        try:
            self._write_batches(conn, loop)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed first
                loop.call_soon_threadsafe(_settle, ended)

    def _write_batches(self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            first = self._jobs.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < BATCH_LIMIT:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                batch.append(job)
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                results = self._run_batch(conn, batch)
            except Exception as exc:  # the connection itself failed
                results = [self._failed(exc)] * len(batch)
            observe = self.observe
            if observe is not None:  # before the answers: an answered write is counted
                _observe(observe, batch, time.perf_counter() - started, time.thread_time() - cpu)
            loop.call_soon_threadsafe(_resolve, batch, results)
            self.backend.between_batches(conn)  # after the answers
            if stop:
                return

    def _run_batch(self, conn: sqlite3.Connection, batch: list[Job]) -> list[Any]:
        """One write transaction for ``batch``: per job, its outcomes, or the exception that
        answers the whole job.  The rerun policy: the module's docstring."""
        try:
            return self._attempt(conn, batch, isolate=False)
        except BatchAborted as exc:
            if outage_of(exc.__cause__) is not None:  # the same outage would fail the rerun
                return [self._failed(exc.__cause__)] * len(batch)
            try:
                return self._attempt(conn, batch, isolate=True)
            except BatchAborted as again:
                return [self._failed(again.__cause__)] * len(batch)

    def _failed(self, cause: BaseException | None) -> Failed:
        """What a client hears when a write transaction failed (``outage.classify``); the
        cause goes to the log once per episode (``outage.Outages``), not to them."""
        error = classify(cause)
        self.outages.failed("writes", error, cause)
        return error

    def _attempt(self, conn: sqlite3.Connection, batch: list[Job], isolate: bool) -> list[Any]:
        with self.backend.attempt(conn, isolate):
            return self._transaction(conn, batch, isolate)

    def _transaction(self, conn: sqlite3.Connection, batch: list[Job],
                     isolate: bool) -> list[Any]:
        backend = self.backend
        replaced = backend.replaced()
        if replaced is not None:
            return [replaced] * len(batch)
        revisions = list(dict.fromkeys(r for job in batch for r in job.revisions))
        try:
            backend.begin(conn, revisions, all(job.keeps_memory for job in batch))
        except Failed as exc:  # e.g. a reconnect that may not take its lock
            return [exc] * len(batch)
        except sqlite3.Error as exc:
            if outage_of(exc) is not None:
                return [self._failed(exc)] * len(batch)
            log.warning("database is busy: %s", exc)
            return [Failed("database is busy", "STORAGE_BUSY")] * len(batch)
        memory = backend.memory
        results: list[Any] = []
        try:
            memory.begin(conn)
            refusal = self._log_refusal(conn) if any(j.appends for j in batch) else None
            memory.absent = backend.absent(conn, revisions)
            for job in batch:
                if refusal is not None and job.appends:
                    results.append(refusal)
                else:
                    results.append(self._run_job(conn, job, isolate))
            backend.before_commit(conn)
            conn.execute("COMMIT")
            memory.absent = set()
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise BatchAborted() from exc
        except BatchAborted:
            self._rollback(conn)
            raise
        backend.committed(conn)
        self.outages.ok("writes")
        return results

    def _run_job(self, conn: sqlite3.Connection, job: Job, isolate: bool) -> list[Any]:
        outcomes: list[Any] = []
        for item in job.items:
            if job.checks_first and not isolate:
                outcome = _checked(conn, job, item)
            else:
                outcome = self._in_savepoint(conn, job, item)
            outcomes.append(outcome)
            if job.stops and isinstance(outcome, BaseException):
                break
        return outcomes

    def _in_savepoint(self, conn: sqlite3.Connection, job: Job, item: Any) -> Any:
        conn.execute("SAVEPOINT job")
        try:
            outcome = job.run(conn, item)
            conn.execute("RELEASE job")
        except Exception as exc:
            if outage_of(exc) is not None:  # not this item's failure: the batch's
                raise BatchAborted() from exc
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            if not isinstance(exc, AlexandriaError):
                log.error("a write failed unexpectedly", exc_info=exc)
            outcome = exc
        # any other write (authority documents, personal lists, an index rebuild) may have
        # changed what the memory holds, or been rolled back
        if not job.keeps_memory or isinstance(outcome, BaseException):
            self.backend.memory.forget()
        return outcome

    def _log_refusal(self, conn: sqlite3.Connection) -> Failed | None:
        """Why no admission may be appended to the log in ``conn`` now: it is behind or a fork
        of the largest checkpoint published (``store/log_floor.py``).  Looked up again whenever
        the writer's memory was forgotten — another connection committed (``data_version``;
        on PostgreSQL, another node wrote), a reconnect, a rollback — else remembered while
        all is well."""
        memory = self.backend.memory
        generation = memory.generation
        # while refused, every batch looks again: a replay in this process may have caught up
        if self._floor_checked != generation or self._floor_problem is not None:
            size = memory.tail(conn)[0]
            self._floor_problem = log_floor.log_problem(conn, log_floor.read_floor(conn), size)
            self._floor_checked = generation
        return self._floor_problem

    def _rollback(self, conn: sqlite3.Connection) -> None:
        self.backend.memory.forget()
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _checked(conn: sqlite3.Connection, job: Job, item: Any) -> Any:
    """A checks-first item, with no savepoint: a refusal is its answer; anything else aborts
    the batch (``BatchAborted``)."""
    try:
        return job.run(conn, item)
    except Refused as exc:
        return exc
    except Exception as exc:
        raise BatchAborted() from exc


def _observe(observe: Callable[[Transaction], None], batch: list[Job], wall_s: float,
             cpu_s: float) -> None:
    try:
        observe(Transaction(sum(len(job.items) for job in batch), wall_s, cpu_s))
    except Exception:  # a meter's failure never stops the writer
        log.exception("observing a write transaction failed")


def _resolve(batch: list[Job], results: list[Any]) -> None:
    for job, res in zip(batch, results, strict=True):
        if job.future.done():
            continue
        if isinstance(res, BaseException):
            job.future.set_exception(res)
            continue
        try:
            answer = job.answer(res)
        except Exception as exc:
            job.future.set_exception(exc)
        else:
            job.future.set_result(answer)


def _settle(ended: asyncio.Future[None]) -> None:
    if not ended.done():
        ended.set_result(None)
