"""PostgreSQL's write path (``store/postgresql/connection.PgConnection.pipelined``): inside the
writer's pipelined transaction a plain insert's rows are held back and sent as one multi-row
statement per table, before anything that could see them; and what a batch of admissions
asks the database once instead of once per admission (``PostgresBackend.absent``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from alexandria.rules.admission import Candidate, prepare
from alexandria.service.bootstrap import Founding
from alexandria.store.postgresql import connection
from alexandria.store.postgresql.connection import (
    FOREIGN_KEYS,
    Dialect,
    Holdable,
    PgConnection,
    _Held,
    _sizes,
    translate,
)
from alexandria.store.postgresql.storage import postgres_storage
from tests.support.catalogue import document
from tests.support.library import Api, Clock
from tests.support.pgcluster import Cluster

pytestmark = pytest.mark.slow


class _Sent:
    """The multi-row inserts a ``PgConnection`` sends: (table, rows)."""

    def __init__(self, conn: PgConnection, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inserts: list[tuple[str, int]] = []
        real = conn._insert_many

        def insert_many(holdable: Holdable, rows: Sequence[Sequence[Any]], cur: Any) -> None:
            self.inserts.append((holdable.table, len(rows)))
            real(holdable, rows, cur)

        monkeypatch.setattr(conn, "_insert_many", insert_many)


@pytest.fixture
def pg(pg_cluster: Cluster) -> Iterator[tuple[PgConnection, str]]:
    url = pg_cluster.database()
    raw = connection.connect(url)
    try:
        yield PgConnection(raw, Dialect()), url
    finally:
        raw.close()
        pg_cluster.drop(url)


def _count(url: str, table: str) -> int:
    with psycopg.connect(url) as other:
        row = other.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        return int(row[0])


def test_inserts_are_held_back_until_something_could_see_them(
    pg: tuple[PgConnection, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, url = pg
    sent = _Sent(conn, monkeypatch)
    conn.execute("BEGIN")
    with conn.pipelined():
        conn.execute("INSERT INTO feed(owner, sequence) VALUES (?, ?)", (1, 1))
        conn.executemany("INSERT INTO feed(owner, sequence) VALUES (?, ?)", [(2, 2), (3, 3)])
        conn.execute("INSERT INTO merkle_nodes(position, hash) VALUES (?, ?)", (1, b"x" * 32))
        assert conn.execute("SELECT count(*) FROM meta").fetchone() == (0,)
        conn.execute("UPDATE objects SET depth = 1 WHERE root = ?", ("none",))
        assert sent.inserts == []  # neither names feed nor merkle_nodes
        assert conn.execute("SELECT count(*) FROM feed").fetchone() == (3,)
        assert sent.inserts == [("feed", 3), ("merkle_nodes", 1)]
        conn.execute("INSERT INTO feed(owner, sequence) VALUES (?, ?)", (4, 4))
        assert _count(url, "feed") == 0  # not committed yet
        conn.execute("COMMIT")  # sends what is held back first
    assert sent.inserts[2:] == [("feed", 1)]
    assert _count(url, "feed") == 4 and _count(url, "merkle_nodes") == 1


def test_held_rows_go_out_in_staggered_chunks(
    pg: tuple[PgConnection, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement's held rows go out ``SEND_ROWS`` at a time as soon as that many are held,
    without waiting for a read or the block's end (PostgreSQL inserts them while the writer
    goes on), the rest held back again and the table's rows in order.  The first chunk of the
    second statement held in the transaction is half as large, so that two tables written one
    row per admission do not send in the same admission."""
    conn, url = pg
    sent = _Sent(conn, monkeypatch)
    chunk = connection.SEND_ROWS
    feed = "INSERT INTO feed(owner, sequence) VALUES (?, ?)"
    nodes = "INSERT INTO merkle_nodes(position, hash) VALUES (?, ?)"

    def admissions(first: int, last: int) -> None:
        for i in range(first, last + 1):
            conn.execute(feed, (1, i))
            conn.execute(nodes, (i, b"x" * 32))

    conn.execute("BEGIN")
    with conn.pipelined():
        admissions(1, chunk // 2 - 1)
        assert sent.inserts == []
        admissions(chunk // 2, chunk - 1)
        assert sent.inserts == [("merkle_nodes", chunk // 2)]
        admissions(chunk, chunk * 3 // 2)
        assert sent.inserts == [("merkle_nodes", chunk // 2), ("feed", chunk),
                                ("merkle_nodes", chunk)]
        del sent.inserts[:]
        held = chunk // 2  # feed's rows after its first chunk
        conn.executemany(feed, [(2, s) for s in range(2 * chunk + 5)])
        assert sent.inserts == [("feed", chunk), ("feed", chunk)]
        total = chunk * 3 // 2 + 2 * chunk + 5
        assert conn.execute("SELECT count(*) FROM feed").fetchone() == (total,)
        # the read sent the rest, and nothing of merkle_nodes (it held none)
        assert sent.inserts[2:] == [("feed", held + 5)]
        conn.execute("COMMIT")
    assert not conn.pipeline_failed
    assert _count(url, "feed") == total
    assert _count(url, "merkle_nodes") == chunk * 3 // 2


def test_a_change_of_another_table_sends_nothing_but_its_foreign_keys(
    pg: tuple[PgConnection, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cosignature's upsert checks its checkpoint (a foreign key): a checkpoint inserted in
    the same transaction is sent first."""
    conn, url = pg
    sent = _Sent(conn, monkeypatch)
    conn.execute("BEGIN")
    with conn.pipelined():
        conn.execute("INSERT INTO checkpoints(size, root, note, key, signed_at)"
                     " VALUES (?, ?, ?, ?, ?)", (1, b"r" * 32, "note", "k", "t"))
        conn.execute("INSERT INTO feed(owner, sequence) VALUES (?, ?)", (1, 1))
        conn.execute("INSERT INTO checkpoint_cosignatures(size, witness, line) VALUES (?, ?, ?)"
                     " ON CONFLICT(size, witness) DO UPDATE SET line = excluded.line",
                     (1, "w", "line"))
        assert ("checkpoints", 1) in sent.inserts
        conn.execute("COMMIT")
    assert not conn.pipeline_failed
    assert _count(url, "checkpoint_cosignatures") == 1 and _count(url, "feed") == 1


def test_a_held_back_insert_fails_at_the_next_statement_and_aborts(
    pg: tuple[PgConnection, str],
) -> None:
    conn, url = pg
    conn.execute("BEGIN")
    with pytest.raises(sqlite3.IntegrityError), conn.pipelined():
        conn.executemany("INSERT INTO feed(owner, sequence) VALUES (?, ?)", [(1, 1), (1, 1)])
        conn.execute("SELECT 1 FROM feed").fetchone()
    assert conn.pipeline_failed
    conn.raw.execute("ROLLBACK")
    assert _count(url, "feed") == 0


def test_the_foreign_keys_are_the_schemas(pg: tuple[PgConnection, str]) -> None:
    conn, _ = pg
    found: dict[str, list[str]] = {}
    for table, referenced in conn.raw.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
        " WHERE contype = 'f' ORDER BY 1, 2"
    ):
        found.setdefault(table, []).append(referenced)
    assert found == {k: list(v) for k, v in FOREIGN_KEYS.items()}


@pytest.mark.parametrize(("sql", "touched"), [
    ("INSERT INTO objects(root, revisions) VALUES (?, 1)", {"objects"}),
    ("UPDATE objects SET revisions = revisions + 1 WHERE root = ?", {"objects"}),
    ("DELETE FROM catalogue_levels WHERE seq = ?", {"catalogue_levels"}),
    ("INSERT INTO checkpoint_cosignatures(size, witness, line) VALUES (?, ?, ?)"
     " ON CONFLICT(size, witness) DO UPDATE SET line = excluded.line",
     {"checkpoint_cosignatures", "checkpoints"}),
    ("DELETE FROM checkpoints WHERE size = ?", {"checkpoints", "checkpoint_cosignatures"}),
    ("UPDATE catalogue SET score = score + ? WHERE seq = (SELECT head_sequence FROM objects"
     " WHERE root = ?)", None),  # a subquery: every word
    ("SELECT t.sequence FROM authorities t JOIN log l ON l.sequence = t.sequence", None),
    ("COMMIT", "all"),
    ("SAVEPOINT job", "all"),
])
def test_what_a_statement_touches(sql: str, touched: set[str] | str | None) -> None:
    found = Dialect().touched(translate(sql))
    if touched == "all":
        assert found is None
    elif touched is None:
        assert found is not None and {"objects", "log", "authorities"} & found
    else:
        assert found is not None and set(found) == touched


async def test_a_batch_asks_once_which_revisions_are_new(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every admission of a batch, and the same envelope twice in one batch (admitted once,
    then an exact retry), on both backends; on PostgreSQL one question for the batch."""
    storage = api.library.storage
    asked: list[str] = []
    real_execute = PgConnection.execute

    def execute(self: PgConnection, sql: str, *args: Any, **kw: Any) -> Any:
        if sql.startswith(("SELECT id FROM revisions", "SELECT sequence FROM revisions WHERE")):
            asked.append(sql)
        return real_execute(self, sql, *args, **kw)

    monkeypatch.setattr(PgConnection, "execute", execute)
    def candidate(content: dict[str, Any]) -> Candidate:
        return prepare(json.dumps(api.envelope("owner", content)).encode(),
                       api.founding.genesis)

    first = candidate(document("One", "first"))
    cands = [first, candidate(document("Two", "second")), first]
    results = await storage.admit_many(cands)
    created = [getattr(r, "created", None) for r in results]
    assert created == [True, True, False], results
    if storage.path.startswith("postgresql"):
        # the batch's question, then the repeated envelope's own (its id left the set)
        assert [s.split(" WHERE")[0] for s in asked] == ["SELECT id FROM revisions",
                                                         "SELECT sequence FROM revisions"]


@pytest.mark.parametrize(("sql", "held"), [
    ("INSERT INTO feed(owner, sequence) VALUES (?, ?)", ("(%s, %s)", "", None, ())),
    ("INSERT INTO objects(root, revisions, depth) VALUES (?, 1, ?)", ("(%s, 1, %s)", "", None, ())),
    ("INSERT OR IGNORE INTO vote_totals(author_id) VALUES (?)",
     ("(%s)", " ON CONFLICT DO NOTHING", None, ())),
    ("INSERT INTO catalogue_counts(kind, facet, author_id, n) VALUES (?, ?, ?, ?)"
     " ON CONFLICT(kind, facet, author_id) DO UPDATE SET n = catalogue_counts.n + excluded.n",
     ("(%s, %s, %s, %s)", " ON CONFLICT(kind, facet, author_id) DO UPDATE SET"
      " n = catalogue_counts.n + excluded.n", (0, 1, 2), (3,))),
    # not additive: a later row of a key must replace, not add to, an earlier one
    ("INSERT INTO checkpoint_cosignatures(size, witness, line) VALUES (?, ?, ?)"
     " ON CONFLICT(size, witness) DO UPDATE SET line = excluded.line", None),
    # the added column must be the row's parameter, the key its parameters
    ("INSERT INTO catalogue_counts(kind, facet, author_id, n) VALUES (?, ?, ?, 1)"
     " ON CONFLICT(kind, facet, author_id) DO UPDATE SET n = catalogue_counts.n + excluded.n",
     None),
    ("INSERT INTO catalogue_counts(kind, facet, author_id, n) VALUES (?, ?, 0, ?)"
     " ON CONFLICT(kind, facet, author_id) DO UPDATE SET n = catalogue_counts.n + excluded.n",
     None),
    ("INSERT INTO catalogue_actors(actor) VALUES (?) RETURNING id", None),
    ("INSERT INTO feed(owner, sequence) SELECT owner, sequence FROM feed_recent", None),
    ("INSERT INTO meta(key, value) VALUES ('a,b', ?)", None),
])
def test_which_inserts_are_held_back(
    sql: str, held: tuple[str, str, tuple[int, ...] | None, tuple[int, ...]] | None
) -> None:
    found = Dialect().holdable(translate(sql))
    if held is None:
        assert found is None
    else:
        assert found is not None
        assert (found.row, found.tail, found.keys, found.sums) == held


def test_held_upserts_end_as_one_at_a_time_would(
    pg: tuple[PgConnection, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ON CONFLICT DO NOTHING`` rows repeating a key, and additive upserts of one key, held
    back and sent as one statement each, leave what sending each row at once leaves."""
    conn, url = pg
    upsert = ("INSERT INTO catalogue_counts(kind, facet, author_id, n) VALUES (?, ?, ?, ?)"
              " ON CONFLICT(kind, facet, author_id) DO UPDATE SET n = catalogue_counts.n"
              " + excluded.n")
    ignore = "INSERT OR IGNORE INTO vote_totals(author_id, up) VALUES (?, ?)"
    conn.execute(upsert, ("claim", "", 0, 5))  # stored before: the upsert adds to it
    sent = _Sent(conn, monkeypatch)
    conn.execute("BEGIN")
    with conn.pipelined():
        for author in (0, 1, 0, 2, 1, 0):
            conn.executemany(upsert, [("claim", "", author, 1), ("claim", "x", author, 2)])
            conn.execute(ignore, (author, author + 10))
        assert sent.inserts == []
        conn.execute("COMMIT")
    assert not conn.pipeline_failed
    assert sorted(sent.inserts) == [("catalogue_counts", 6), ("vote_totals", 6)]
    with psycopg.connect(url) as other:
        counts = other.execute("SELECT facet, author_id, n FROM catalogue_counts"
                               " ORDER BY 1, 2").fetchall()
        totals = other.execute("SELECT author_id, up FROM vote_totals ORDER BY 1").fetchall()
    assert counts == [("", 0, 8), ("", 1, 2), ("", 2, 1), ("x", 0, 6), ("x", 1, 4), ("x", 2, 2)]
    assert totals == [(0, 10), (1, 11), (2, 12)]  # the first row of each key


def test_held_upsert_rows_with_a_null_key_stay_apart() -> None:
    """A NULL never conflicts: rows whose key holds one are not summed."""
    holdable = Dialect().holdable(translate(
        "INSERT INTO t(a, b, n) VALUES (?, ?, ?) ON CONFLICT(a, b) DO UPDATE SET n = t.n"
        " + excluded.n"))
    assert holdable is not None
    held = _Held(holdable)
    held.add([("x", None, 1), ("x", 1, 1), ("x", None, 1), ("x", 1, 2)])
    assert [tuple(r) for r in held.rows] == [("x", None, 1), ("x", 1, 3), ("x", None, 1)]
    # a chunk of held upserts is all of them: a row left held could be summed into after
    held.chunk = 1
    assert len(held.take()) == 3 and held.rows == []
    held.add([("x", 1, 1)])
    assert [tuple(r) for r in held.rows] == [("x", 1, 1)]


def test_a_chunk_of_plain_held_rows_keeps_the_rest_in_order() -> None:
    holdable = Dialect().holdable(translate("INSERT INTO t(a) VALUES (?)"))
    assert holdable is not None
    held = _Held(holdable, chunk=2)
    held.add([(1,), (2,), (3,)])
    assert held.take() == [(1,), (2,)]
    assert held.rows == [(3,)]


@given(st.integers(min_value=0, max_value=5 * connection.MANY_ROWS))
def test_held_rows_go_out_in_few_statements_of_few_sizes(rows: int) -> None:
    """A multi-row insert of ``rows`` rows is one statement of ``MANY_ROWS`` per full
    ``MANY_ROWS``, then powers of two, largest first, then the rest of at most ``EXACT_ROWS``
    rows as one statement: a group of a few admissions is one statement per table, and a
    table has at most 21 sizes of statement to prepare."""
    sizes = _sizes(rows)
    assert sum(sizes) == rows
    assert sizes == sorted(sizes, reverse=True)
    # every size but the last a power of two; the last one too, or at most EXACT_ROWS
    assert all(s & (s - 1) == 0 and s <= connection.MANY_ROWS for s in sizes[:-1])
    assert not sizes or sizes[-1] & (sizes[-1] - 1) == 0 or sizes[-1] <= connection.EXACT_ROWS
    assert len(set(sizes) - {connection.MANY_ROWS}) == len(sizes) - sizes.count(
        connection.MANY_ROWS)  # beyond the full statements, each size at most once


def test_the_sizes_of_some_groups() -> None:
    assert _sizes(0) == []
    assert _sizes(11) == [11]
    assert _sizes(16) == [16]
    assert _sizes(17) == [16, 1]
    assert _sizes(45) == [32, 13]
    assert _sizes(1100) == [512, 512, 64, 12]
    possible = {s for n in range(2 * connection.MANY_ROWS) for s in _sizes(n)}
    assert len(possible) == connection.EXACT_ROWS + 5  # 1–16, 32, 64, 128, 256, 512


def test_a_small_groups_rows_are_one_statement_prepared_once(
    pg: tuple[PgConnection, str], tmp_path: Path
) -> None:
    """The held rows of a group of eleven admissions go out as one insert of eleven rows,
    parsed once per connection: the next group of eleven runs the prepared statement."""
    conn, url = pg
    feed = "INSERT INTO feed(owner, sequence) VALUES (?, ?)"
    parsed = []
    for group in range(2):
        with _Trips(conn.raw, tmp_path / f"trace{group}") as trace:
            conn.execute("BEGIN")
            with conn.pipelined():
                for i in range(11):
                    conn.execute(feed, (group, i))
                conn.execute("COMMIT")
        assert not conn.pipeline_failed
        parsed.append(trace.parsed_inserts)
        assert trace.statements == 3  # BEGIN, the eleven rows, COMMIT
    assert [[sql.count("), (") + 1 for sql in p] for p in parsed] == [[11], []]
    assert _count(url, "feed") == 22


def test_another_insert_into_a_held_table_sends_the_held_rows_first(
    pg: tuple[PgConnection, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain insert after an ``INSERT OR IGNORE`` of the same key fails, as it would had
    the first been sent at once (held rows of two statements are not reordered)."""
    conn, _ = pg
    sent = _Sent(conn, monkeypatch)
    conn.execute("BEGIN")
    with pytest.raises(sqlite3.IntegrityError), conn.pipelined():
        conn.execute("INSERT OR IGNORE INTO vote_totals(author_id) VALUES (?)", (7,))
        conn.execute("INSERT INTO vote_totals(author_id, up) VALUES (?, ?)", (7, 1))
        assert sent.inserts == [("vote_totals", 1)]
        conn.execute("SELECT 1 FROM vote_totals").fetchone()
    conn.raw.execute("ROLLBACK")


class _Trips:
    """The messages the writer's connection sends, from libpq's trace: each ``Sync`` is a
    round trip (the client waits for the server's ``ReadyForQuery``), each ``Bind`` or
    ``Query`` a statement run."""

    def __init__(self, raw: psycopg.Connection[Any], path: Path) -> None:
        self.raw, self.path = raw, path
        self.file = open(path, "w")  # noqa: SIM115 - closed by stop()

    def __enter__(self) -> _Trips:
        self.raw.pgconn.trace(self.file.fileno())
        self.raw.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        return self

    def __exit__(self, *exc: object) -> None:
        self.raw.pgconn.untrace()
        self.file.close()
        lines = [line.split("\t") for line in self.path.read_text().splitlines()]
        sent = [fields[2].strip() for fields in lines if len(fields) > 2 and fields[0] == "F"]
        self.round_trips = sent.count("Sync") + sent.count("Query")
        self.statements = sent.count("Bind") + sent.count("Query")
        #: the inserts parsed (not run from a statement prepared earlier): their text
        self.parsed_inserts = [fields[3] for fields in lines if len(fields) > 3
                               and fields[0] == "F" and fields[2].strip() == "Parse"
                               and "INSERT INTO" in fields[3]]
        #: of those, the multi-row inserts
        self.inserts_parsed = sum(1 for sql in self.parsed_inserts if "), (" in sql)


def _document(founding: Founding, clock: Clock, i: int) -> Candidate:
    envelope = founding.participants["owner"].envelope(
        founding.genesis, document(f"Title {i}", f"text {i}"), clock.tick())
    return prepare(json.dumps(envelope).encode(), founding.genesis, index_text=True)


async def test_a_group_costs_two_round_trips_whatever_its_size(
    pg_cluster: Cluster, founding: Founding, clock: Clock, tmp_path: Path
) -> None:
    """The PostgreSQL writer's round trips per group commit do not grow with its admissions:
    ``BEGIN``, the write lock and the batch's question in one round trip, every admission's
    rows sent without waiting, then the ``COMMIT``'s; each table's rows in one statement per
    power of two (40 rows: 32 and 8), each prepared once.  (The storage alone: no library's
    background writes.)"""
    url = pg_cluster.database()
    storage = postgres_storage(url, founding.genesis)
    storage.clock = clock
    try:
        await storage.open()
        for doc in founding.authority_documents():
            await storage.admit_authority(doc)
        # the writer's memory learns the log's tail and the Merkle nodes it appends to
        await storage.admit_many([_document(founding, clock, i) for i in range(8)])
        trips = []
        for start, n in ((8, 4), (12, 40), (52, 40)):
            raw = storage._writer.conn.raw  # type: ignore[union-attr]
            with _Trips(raw, tmp_path / f"trace{n}") as trace:
                results = await storage.admit_many(
                    [_document(founding, clock, start + i) for i in range(n)])
            assert [getattr(r, "created", None) for r in results] == [True] * n
            trips.append(trace)
        assert [t.round_trips for t in trips] == [2, 2, 2]
        assert trips[0].statements < trips[1].statements <= 2 * trips[0].statements
        assert trips[1].inserts_parsed > 0
        assert trips[2].inserts_parsed == 0  # the same sizes again: all prepared
    finally:
        await storage.close()
        pg_cluster.drop(url)
