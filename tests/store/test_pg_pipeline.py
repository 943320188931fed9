"""PostgreSQL's write path (``store/postgresql/connection.PgConnection.pipelined``): inside the
writer's pipelined transaction a plain insert's rows are held back and sent as one multi-row
statement per table, before anything that could see them; and what a batch of admissions
asks the database once instead of once per admission (``PostgresStorage._absent``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

from alexandria.rules.admission import Candidate, prepare
from alexandria.store.postgresql import connection
from alexandria.store.postgresql.connection import (
    FOREIGN_KEYS,
    Dialect,
    PgConnection,
    translate,
)
from tests.support.catalogue import document
from tests.support.library import Api
from tests.support.pgcluster import Cluster

pytestmark = pytest.mark.slow


class _Sent:
    """The multi-row inserts a ``PgConnection`` sends: (table, rows)."""

    def __init__(self, conn: PgConnection, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inserts: list[tuple[str, int]] = []
        real = conn._insert_many

        def insert_many(head: str, width: int, rows: Sequence[Sequence[Any]]) -> None:
            self.inserts.append((head.split()[2].split("(")[0], len(rows)))
            real(head, width, rows)

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
    ("DELETE FROM catalogue_postings WHERE seq = ?", {"catalogue_postings"}),
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
