"""The writer's memory never answers with something the database no longer holds: another
connection's commits and this connection's rollbacks make it forget."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from alexandria.core import merkle
from alexandria.core.cache import Bounded
from alexandria.errors import Conflict
from alexandria.rules.admission import Candidate, prepare
from alexandria.service.bootstrap import Founding
from alexandria.store import search_index
from alexandria.store.backends import open_readonly, storage_for
from alexandria.store.interface import Admitted
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.merkle_nodes import node_reader
from alexandria.store.writer_memory import LIMIT
from tests.support.library import Clock


def _claim(title: str, previous: str = "") -> dict[str, Any]:
    return {
        "kind": "claim", "title": title, "links": [], "previous": previous,
        "body": {"statement": title, "scope": "Tests", "assumptions": []},
    }


class Two:
    """Two storages on one database: two connections, as two server processes (or nodes)."""

    def __init__(self, founding: Founding, clock: Clock, a: LedgerStorage, b: LedgerStorage,
                 db: Path | str):
        self.founding, self.clock, self.a, self.b, self.db = founding, clock, a, b, db

    def candidate(self, who: str, content: dict[str, Any]) -> Candidate:
        env = self.founding.participants[who].envelope(
            self.founding.genesis, content, self.clock.tick()
        )
        return prepare(json.dumps(env).encode(), self.founding.genesis)

    async def admit(self, storage: LedgerStorage, content: dict[str, Any]) -> Admitted:
        result = await storage.admit(self.candidate("owner", content))
        assert isinstance(result, Admitted)
        return result


@pytest.fixture
async def two(db: Path | str, founding: Founding, clock: Clock) -> AsyncIterator[Two]:
    a = storage_for(db, founding.genesis)
    b = storage_for(db, founding.genesis)
    a.clock = b.clock = clock
    await a.open()
    await b.open()
    for doc in founding.authority_documents():
        await a.admit_authority(doc)
    try:
        yield Two(founding, clock, a, b, db)
    finally:
        await a.close()
        await b.close()


def _log_is_whole(db: Path | str) -> None:
    """Sequences gapless and the stored Merkle nodes agree with the leaves."""
    with open_readonly(db) as conn:
        rows = conn.execute("SELECT sequence, leaf FROM log ORDER BY sequence").fetchall()
        assert [s for s, _ in rows] == list(range(1, len(rows) + 1))
        leaves = [merkle.leaf_hash(bytes(leaf)) for _, leaf in rows]
        assert merkle.root_hash(len(rows), node_reader(conn)) == merkle.root_from_leaves(leaves)


async def test_a_head_moved_by_another_connection_is_seen(two: Two, tmp_path: Path) -> None:
    first = await two.admit(two.a, _claim("v1"))
    second = await two.admit(two.a, _claim("v2", first.id))  # a now remembers the object
    third = await two.admit(two.b, _claim("v3", second.id))  # the head moves elsewhere
    with pytest.raises(Conflict) as refused:
        await two.a.admit(two.candidate("owner", _claim("v3 again", second.id)))
    assert refused.value.code == "HEAD_CONFLICT"
    assert refused.value.details["head"] == third.id
    fourth = await two.admit(two.a, _claim("v4", third.id))
    assert fourth.sequence == third.sequence + 1
    _log_is_whole(two.db)


async def test_interleaved_writers_keep_the_log_whole(two: Two, tmp_path: Path) -> None:
    for i in range(23):  # odd sizes exercise every Merkle level's newest node
        await two.admit((two.a, two.b)[i % 3 == 0], _claim(f"claim {i}"))
    _log_is_whole(two.db)


@pytest.mark.parametrize("failure", ["python", "database"])
async def test_a_rolled_back_admission_is_forgotten(
    two: Two, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """``database``: a statement the database refuses (a duplicate key), which PostgreSQL's
    pipeline mode reports only at a later read or at the commit."""
    await two.admit(two.a, _claim("before"))
    real = search_index.on_admitted

    def failing(conn: sqlite3.Connection, record: Any, *args: Any, **kw: Any) -> None:
        if record.title == "fails after writing":
            if failure == "database":
                conn.execute("INSERT INTO merkle_nodes(position, hash) VALUES (0, ?)",
                             (b"\0" * 32,))
            else:
                raise RuntimeError("index failure after the log and Merkle rows were written")
        real(conn, record, *args, **kw)

    monkeypatch.setattr(search_index, "on_admitted", failing)
    results = await two.a.admit_many([
        two.candidate("owner", _claim("bulk one")),
        two.candidate("owner", _claim("fails after writing")),
        two.candidate("owner", _claim("bulk two")),
    ])
    assert isinstance(results[1], RuntimeError if failure == "python" else sqlite3.Error)
    assert [r.sequence for r in results if isinstance(r, Admitted)] == [4, 5]
    after = await two.admit(two.a, _claim("after"))
    assert after.sequence == 6
    _log_is_whole(two.db)


def test_bounded_caches_empty_instead_of_growing() -> None:
    cache: Bounded[int, int] = Bounded(LIMIT)
    for i in range(LIMIT):
        cache[i] = i
    cache[0] = -1  # replacing keeps everything
    assert len(cache) == LIMIT
    cache[LIMIT] = LIMIT
    assert dict(cache) == {LIMIT: LIMIT}



async def test_other_writes_make_the_memory_forget(two: Two) -> None:
    first = await two.admit(two.a, _claim("v1"))
    second = await two.admit(two.a, _claim("v2", first.id))  # a remembers the object's head

    def move_head_back(conn: sqlite3.Connection) -> None:
        # any write job other than an admission stands for state the memory cannot follow
        conn.execute("UPDATE objects SET head = ? WHERE root = ?", (first.id, first.id))

    await two.a.write(move_head_back)
    with pytest.raises(Conflict) as refused:
        await two.a.admit(two.candidate("owner", _claim("v3", second.id)))
    assert refused.value.details["head"] == first.id
