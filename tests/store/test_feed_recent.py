"""``store/feed.py``'s recent feed rows: staged in ``feed_recent`` and moved into ``feed`` one
range of owners per write transaction, never lost or duplicated, all moved within a cycle of
``MERGE_ROUNDS`` + 1 moves; and a library's writer moving them as it admits, its reads unchanged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from alexandria.service.bootstrap import Founding
from alexandria.store import feed, schema
from tests.support.library import Clock, serve_library
from tests.support.objects import claim, space


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(schema.TABLES)
    return conn


def _rows(conn: sqlite3.Connection, table: str) -> set[tuple[int, int]]:
    return {(int(o), int(s)) for o, s in conn.execute(f"SELECT owner, sequence FROM {table}")}


rows_strategy = st.sets(st.tuples(st.integers(1, 300), st.integers(1, 300)), max_size=200)


@settings(max_examples=60, deadline=None)
@given(old=rows_strategy, new=rows_strategy, start=st.integers(0, 400),
       moves=st.integers(0, 2 * feed.MERGE_ROUNDS))
def test_moves_keep_every_row_once(old: set[tuple[int, int]], new: set[tuple[int, int]],
                                   start: int, moves: int) -> None:
    """Whatever the start and the number of moves, the two tables together hold exactly the
    rows written, ``feed`` only gains, and each move takes one range of owners whole."""
    conn = _db()
    conn.executemany("INSERT INTO feed(owner, sequence) VALUES (?, ?)", sorted(old))
    conn.executemany("INSERT OR IGNORE INTO feed_recent(owner, sequence) VALUES (?, ?)",
                     sorted(new - old))
    written = old | new
    keys = 300
    step = -(-keys // feed.MERGE_ROUNDS)
    at = start
    for _ in range(moves):
        before, kept = _rows(conn, "feed_recent"), _rows(conn, "feed")
        nxt = feed.merge_recent(conn, at, keys)
        moved = before - _rows(conn, "feed_recent")
        assert kept <= _rows(conn, "feed")
        assert moved == {r for r in before if at <= r[0] < at + step}
        assert nxt == (0 if at + step > keys else at + step)
        at = nxt
        assert _rows(conn, "feed") | _rows(conn, "feed_recent") == written
        assert not _rows(conn, "feed") & _rows(conn, "feed_recent")
    assert conn.execute(f"SELECT count(*) FROM {feed.ROWS} AS f").fetchone()[0] == len(written)


def test_a_revision_stages_its_rows_on_sqlite() -> None:
    conn = _db()
    feed.write_rows(conn, feed.Near((5, 7), (0, 1), (False, True)), 9)
    assert _rows(conn, "feed_recent") == {(5, 9), (7, 9)}
    assert _rows(conn, "feed") == set()


def test_a_full_cycle_empties_the_staging_table() -> None:
    """From any start, ``MERGE_ROUNDS`` + 1 moves pass every owner up to the log's size."""
    conn = _db()
    rows = [(o, s) for o in range(1, 1001) for s in (o, o + 1000)]
    conn.executemany("INSERT INTO feed_recent(owner, sequence) VALUES (?, ?)", rows)
    at = 517
    for _ in range(feed.MERGE_ROUNDS + 1):
        at = feed.merge_recent(conn, at, 2000)
    assert _rows(conn, "feed_recent") == set()
    assert _rows(conn, "feed") == set(rows)


async def test_the_writer_moves_recent_rows_and_reads_take_both_tables(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    """Admissions stage their feed rows; every later write transaction moves a range, so after
    ``MERGE_ROUNDS`` more transactions the rows of the first admissions are in ``feed`` — and a
    root's changes read the same before and after the move."""
    async for api in serve_library(tmp_path, founding, clock):
        home = await api.publish("owner", space("Staged"))
        first = await api.publish("owner", claim("Staged first", home["id"]))
        storage = api.library.storage

        def where(conn: sqlite3.Connection, rev: str = first["id"]) -> tuple[int, int]:
            seq = "(SELECT sequence FROM revisions WHERE id = ?)"
            moved, staged = (
                int(conn.execute(f"SELECT count(*) FROM {table} WHERE sequence = {seq}",
                                 (rev,)).fetchone()[0])
                for table in ("feed", "feed_recent"))
            return moved, staged

        assert sum(await storage.read(where)) == 1  # the space's row, staged or moved
        before = (await api.client.get("/api/changes", params={"root": home["id"]})).json()
        for i in range(feed.MERGE_ROUNDS + 1):
            await api.publish("owner", claim(f"Later {i}"))
        assert await storage.read(where) == (1, 0)
        after = (await api.client.get("/api/changes", params={"root": home["id"]})).json()
        assert [i["id"] for i in before["items"]] == [home["id"], first["id"]]
        assert [i["id"] for i in after["items"]] == [home["id"], first["id"]]
