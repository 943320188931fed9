"""Read-ahead: a page of scattered records is fetched by several connections at once
before the reader assembles it, and what is served does not change.  The unit tests drive
``store/read_ahead`` on a SQLite file (read-ahead opens its own SQLite connections; PostgreSQL
has its reader pool instead); the served bytes are compared on both backends (``api``)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from alexandria.store import read_ahead, schema
from alexandria.store.read_ahead import MINIMUM, Key, ReadAhead
from tests.support.catalogue import vote
from tests.support.library import Api
from tests.support.objects import claim, discussion, reply, space


def _library(path: Path, rows: int) -> None:
    """Records at sequences ``0 … rows - 1``: every third (from 0) of the earlier layout, its
    revision's pieces in ``revisions``; the others with them in ``log`` alone."""
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE revisions(sequence INTEGER PRIMARY KEY, id TEXT, root TEXT,"
        " record_length INTEGER, authority_seq INTEGER);"
        "CREATE TABLE log(sequence INTEGER PRIMARY KEY, leaf BLOB, admitted_at TEXT, id TEXT,"
        " root TEXT, record_length INTEGER, authority_seq INTEGER);"
        "CREATE TABLE catalogue_words(seq INTEGER PRIMARY KEY, title TEXT, body TEXT);"
    )
    conn.executemany("INSERT INTO revisions VALUES (?, ?, ?, ?, ?)",
                     [(i, f"r{i}", f"r{i - i % 2}", 10, 1) for i in range(0, rows, 3)])
    conn.executemany("INSERT INTO log VALUES (?, ?, ?, ?, ?, ?, ?)", [
        (i, b"x" * 5000, f"t{i}", *((None,) * 4 if i % 3 == 0 else (f"r{i}", f"r{i - i % 2}",
                                                                     10, 1)))
        for i in range(rows)])
    conn.commit()
    conn.close()


def test_a_page_is_read_on_several_connections_at_once(tmp_path: Path) -> None:
    path = tmp_path / "lib.db"
    _library(path, 200)
    ahead = ReadAhead(str(path), threads=4)
    entered: set[str] = set()
    barrier = threading.Barrier(4, timeout=10)
    original = ahead._fetch

    def fetch(sql: str, sequences: Sequence[Key]) -> list[tuple[Key, tuple[Any, ...]]]:
        entered.add(threading.current_thread().name)
        barrier.wait()  # all four lanes are in flight together, or this times out
        return original(sql, sequences)

    ahead._fetch = fetch  # type: ignore[method-assign]  # the lanes wait for each other
    try:
        ahead.rows("records", list(range(0, 200, 5)))
        assert len(entered) == 4
    finally:
        ahead.close()


def test_a_short_page_is_left_to_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "lib.db"
    _library(path, 20)
    ahead = ReadAhead(str(path))
    try:
        ahead.rows("records", list(range(MINIMUM - 1)))
        assert ahead._connections.opened == []
        ahead.rows("records", list(range(MINIMUM)))
        assert ahead._connections.opened
    finally:
        ahead.close()


def test_a_failed_read_ahead_is_not_an_error(tmp_path: Path) -> None:
    """Best effort: a read that fails (here a table that is not there) leaves the reader to it."""
    path = tmp_path / "lib.db"
    sqlite3.connect(path).close()
    ahead = ReadAhead(str(path))
    try:
        ahead.rows("records", list(range(50)))
    finally:
        ahead.close()


def test_only_named_reads_are_read_ahead(tmp_path: Path) -> None:
    ahead = ReadAhead(str(tmp_path / "lib.db"))
    try:
        with pytest.raises(KeyError):
            ahead.rows("DROP TABLE log", [1] * 50)
    finally:
        ahead.close()


async def test_pages_read_ahead_are_the_pages_read_alone(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same catalogue, scores, object and discussion bytes with and without read-ahead, and
    with it on every page."""
    top = (await api.publish("owner", space("Orchard")))["id"]
    talk = (await api.publish("owner", discussion("Apples", parent=top)))["id"]
    for i in range(30):
        made = await api.publish("owner", claim(f"Claim number {i} about apples", top))
        if i % 3:
            await api.publish("peer", vote(made["id"], "1" if i % 2 else "-1"))
        if i % 2:
            await api.publish("peer", discussion(f"On claim {i}", parent=top))
            await api.publish("peer", reply(talk, f"Reply {i}"))
    peer = api.founding.participants["peer"].actor
    urls = ["/api/catalogue", "/api/catalogue?q=apples", "/api/catalogue?q=claim+apples",
            "/api/catalogue?projection=summary", "/api/catalogue?offset=7&kind=claim",
            f"/api/scores?author={peer}", f"/api/scores?author={peer}&offset=3"]
    urls += [f"/api/objects/{top}?section={section}" for section in
             ("all", "children", "discussions", "knowledge")]
    urls += [f"/api/entries/{top}/discussion?sort={sort}" for sort in ("new", "top")]
    urls += [f"/api/entries/{talk}/discussion", f"/api/objects/{top}?section=children&offset=5"]
    monkeypatch.setattr(read_ahead, "MINIMUM", 1)
    answers = [await api.client.get(u) for u in urls]
    assert [a.status_code for a in answers] == [200] * len(urls)
    with_ahead = [a.content for a in answers]
    monkeypatch.setattr(read_ahead, "MINIMUM", 10**9)
    alone = [(await api.client.get(u)).content for u in urls]
    assert with_ahead == alone
    assert all(b'"total":0' not in body and b'"votes":[]' not in body
               and b'"items":[]' not in body for body in alone)


def test_every_read_ahead_statement_runs_on_a_library(tmp_path: Path) -> None:
    """A read-ahead fails quietly (best effort), so a statement that does not fit the schema
    would only make reads slower: each one runs here on a library's tables, with its keys."""
    conn = sqlite3.connect(tmp_path / "lib.db")
    conn.executescript(schema.TABLES)
    for sql in read_ahead._ROWS_SQL.values():
        conn.execute(sql, (1,)).fetchall()
    conn.close()


def _record(i: int) -> tuple[object, ...]:
    """The row of ``schema.SIGNED_COLUMNS`` ``_library`` holds at sequence ``i``."""
    return (f"r{i}", f"r{i - i % 2}", i, 10, 1, b"x" * 5000, f"t{i}")


def test_records_read_ahead_are_kept_for_the_thread_that_asked_until_it_takes_them(
    tmp_path: Path,
) -> None:
    """The reader then assembles the page from them (``signed_many``) instead of reading them,
    or fetching them ahead, a second time."""
    path = tmp_path / "lib.db"
    _library(path, 60)
    ahead = ReadAhead(str(path), threads=4)
    try:
        ahead.rows("records", list(range(0, 60, 2)))
        elsewhere: list[dict[int, tuple[object, ...]]] = []
        other = threading.Thread(target=lambda: elsewhere.append(ahead.kept([0, 2, 4])))
        other.start()
        other.join()
        assert elsewhere == [{}]  # another reader's thread has none of them
        assert ahead.kept([4, 5, 58, 99]) == {4: _record(4), 58: _record(58)}
        assert ahead.kept([4]) == {}  # taken: the rest were dropped with them
        ahead.rows("records", list(range(0, 20)))
        ahead.rows("records", list(range(30, 50)))  # in place of the first
        assert ahead.kept([10, 40]) == {40: _record(40)}
        ahead.rows("catalogue_words", list(range(20)))  # not records: nothing kept
        assert ahead.kept(list(range(60))) == {}
    finally:
        ahead.close()


def test_fetched_rows_are_returned_and_a_missing_or_failed_one_is_left_to_the_reader(
    tmp_path: Path,
) -> None:
    path = tmp_path / "lib.db"
    _library(path, 40)
    ahead = ReadAhead(str(path), threads=4)
    try:
        keys = [*range(0, 40, 3), 99]  # 99: no such row
        rows = ahead.fetch("SELECT sequence, id FROM revisions WHERE sequence = ?", keys)
        assert rows == {k: (k, f"r{k}") for k in keys if k != 99}
        assert ahead.fetch("SELECT id FROM revisions WHERE sequence = ?", [1, 2]) == {}
        assert ahead.fetch("SELECT id FROM no_such_table WHERE x = ?", list(range(20))) == {}
    finally:
        ahead.close()
