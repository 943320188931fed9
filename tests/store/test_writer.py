"""The group-commit writer's one rerun policy (``store/writer.py``), over a backend of the
protocol (``store/protocol.WriteBackend``) on a real SQLite file: a checks-first job's refusal
is its item's answer with no rerun; an unplanned failure rolls the batch back and runs it
again with each item in its own savepoint, so that item fails alone; a job that ``stops``
runs nothing after its first failing item."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from alexandria.errors import Failed, Malformed
from alexandria.store.interface import Transaction
from alexandria.store.outage import Outages
from alexandria.store.writer import Writer, only
from alexandria.store.writer_memory import WriterMemory


class _Backend:
    """The smallest ``WriteBackend``: one SQLite file, ``BEGIN IMMEDIATE``; it records each
    attempt of a batch (False: the first, True: the rerun with a savepoint per item)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.memory = WriterMemory()
        self.attempts: list[bool] = []

    def connect_writer(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("CREATE TABLE rows(item TEXT)")
        return conn

    def begin(self, conn: sqlite3.Connection, revisions: Sequence[str],
              keeps_memory: bool = False) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def absent(self, conn: sqlite3.Connection, revisions: Sequence[str]) -> set[str]:
        return set()

    @contextlib.contextmanager
    def attempt(self, conn: sqlite3.Connection, isolate: bool) -> Iterator[None]:
        self.attempts.append(isolate)
        yield

    def before_commit(self, conn: sqlite3.Connection) -> None:
        pass

    def committed(self, conn: sqlite3.Connection) -> None:
        pass

    def between_batches(self, conn: sqlite3.Connection) -> None:
        pass

    def replaced(self) -> Failed | None:
        return None


def _insert(conn: sqlite3.Connection, item: str) -> str:
    """An item that refuses before writing (``refused``) or fails after (``bug``)."""
    if item == "refused":
        raise Malformed("refused before writing", "REFUSED")
    conn.execute("INSERT INTO rows(item) VALUES (?)", (item,))
    if item == "bug":
        raise RuntimeError("a bug after writing")
    return item


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[tuple[Writer, _Backend]]:
    backend = _Backend(tmp_path / "w.db")
    w = Writer(backend, Outages(backend.path))
    w.conn = backend.connect_writer()
    try:
        yield w, backend
    finally:
        await w.close()
        w.conn.close()


def _stored(w: Writer) -> list[str]:
    assert w.conn is not None
    return [r[0] for r in w.conn.execute("SELECT item FROM rows ORDER BY rowid")]


async def test_a_refusal_answers_its_item_without_a_rerun(
    writer: tuple[Writer, _Backend]
) -> None:
    w, backend = writer
    out = await w.submit(_insert, ["a", "refused", "b"], list, checks_first=True)
    assert out[0] == "a" and out[2] == "b"
    assert isinstance(out[1], Malformed) and out[1].code == "REFUSED"
    assert backend.attempts == [False]
    assert _stored(w) == ["a", "b"]


async def test_an_unplanned_failure_reruns_the_batch_and_fails_alone(
    writer: tuple[Writer, _Backend]
) -> None:
    w, backend = writer
    many = w.submit(_insert, ["a", "bug", "b"], list, checks_first=True)
    single = w.submit(_insert, ["c"], only, checks_first=True)  # same batch, or the next
    out = await many
    assert await single == "c"
    assert out[0] == "a" and out[2] == "b"
    assert isinstance(out[1], RuntimeError)
    assert backend.attempts[:2] == [False, True]
    assert _stored(w) == ["a", "b", "c"]  # nothing of the failing item


async def test_a_job_that_stops_runs_nothing_after_its_first_failure(
    writer: tuple[Writer, _Backend]
) -> None:
    w, _backend = writer
    out: list[Any] = await w.submit(_insert, ["a", "refused", "b"], list, checks_first=True,
                                    stops=True)
    assert out[0] == "a" and isinstance(out[1], Malformed) and len(out) == 2
    out = await w.submit(_insert, ["c", "bug", "d"], list, checks_first=True, stops=True)
    assert out[0] == "c" and isinstance(out[1], RuntimeError) and len(out) == 2
    assert _stored(w) == ["a", "c"]


async def test_a_write_runs_in_a_savepoint_and_its_failure_is_raised(
    writer: tuple[Writer, _Backend]
) -> None:
    w, backend = writer
    with pytest.raises(RuntimeError):
        await w.submit(_insert, ["bug"], only)
    assert await w.submit(_insert, ["a"], only) == "a"
    assert backend.attempts == [False, False]  # a savepoint from the start: no rerun
    assert _stored(w) == ["a"]


async def test_a_write_that_keeps_the_memory_does_not_make_the_writer_forget(
    writer: tuple[Writer, _Backend]
) -> None:
    """A write job forgets what the writer remembers (it may have changed it) unless it says it
    writes nothing the memory holds (a checkpoint: ``keeps_memory``); a failed one forgets all
    the same, its savepoint rolled back."""
    w, backend = writer
    await w.submit(_insert, ["a"], only)
    generation = backend.memory.generation
    assert await w.submit(_insert, ["b"], only, keeps_memory=True) == "b"
    assert backend.memory.generation == generation
    await w.submit(_insert, ["c"], only)
    assert backend.memory.generation > generation
    generation = backend.memory.generation
    with pytest.raises(RuntimeError):
        await w.submit(_insert, ["bug"], only, keeps_memory=True)
    assert backend.memory.generation > generation
    assert _stored(w) == ["a", "b", "c"]


async def test_each_transaction_is_observed_before_its_answers(
    writer: tuple[Writer, _Backend]
) -> None:
    """``observe`` sees every write transaction before its answers arrive: its items, its wall
    time and the writer thread's CPU time in it; a meter that fails is logged and the writer
    goes on."""
    w, _backend = writer
    seen: list[Transaction] = []
    w.observe = seen.append
    assert await w.submit(_insert, ["a", "b", "c"], list, checks_first=True) == ["a", "b", "c"]
    assert await w.submit(_insert, ["d"], only) == "d"
    assert [t.items for t in seen] == [3, 1]
    assert all(t.wall_s >= t.cpu_s >= 0 and t.wall_s > 0 for t in seen)

    def broken(_t: Transaction) -> None:
        raise RuntimeError("a broken meter")

    w.observe = broken
    assert await w.submit(_insert, ["e"], only) == "e"
    assert await w.submit(_insert, ["f"], only) == "f"
    assert _stored(w) == ["a", "b", "c", "d", "e", "f"]
