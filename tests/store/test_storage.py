"""Storage behaviour that the HTTP tests do not pin down.  The tests taking ``api`` or ``db``
run on both backends (SQLite's schema versions are tested in tests/store/test_sqlite_migrations.py,
PostgreSQL's in tests/store/test_postgresql.py)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import orjson
import psycopg
import pytest

from alexandria.core.timestamps import parse_ms
from alexandria.reads import objects as objects_reads
from alexandria.reads.objects import SECTIONS
from alexandria.service.bootstrap import Founding
from alexandria.store import feed, schema
from alexandria.store.merkle_nodes import tree_size
from tests.support import objects as objects_support
from tests.support.catalogue import vote
from tests.support.library import Api, Clock, serve_library
from tests.support.objects import publish_example


def _claim(title: str) -> dict[str, object]:
    return {
        "kind": "claim",
        "title": title,
        "links": [],
        "previous": "",
        "body": {"statement": title, "scope": "Tests", "assumptions": []},
    }


async def test_admitted_at_never_decreases_when_the_clock_steps_back(api: Api) -> None:
    first = await api.publish("owner", _claim("First"))
    api.clock.ms -= 3_600_000  # the server clock steps back an hour
    env = api.envelope("owner", _claim("Second"), authored_at=api.clock.tick(1))
    r = await api.post(env)
    assert r.status_code == 201, r.text
    second = r.json()
    a = parse_ms(first["admission"]["admitted_at"])
    b = parse_ms(second["admission"]["admitted_at"])
    assert a is not None and b is not None and b >= a
    assert second["admission"]["sequence"] == first["admission"]["sequence"] + 1


async def test_signed_record_from_memory_equals_the_stored_one(api: Api) -> None:
    r = await api.post(api.envelope("peer", _claim("Spliced")))
    assert r.status_code == 201
    stored = await api.client.get(f"/api/entries/{r.json()['id']}")
    assert stored.content == r.content


async def _reads(api: Api, revisions: list[str]) -> list[bytes]:
    """Every read that the layout of feeds, ancestors and histories serves, for each revision."""
    out = []
    for rev in revisions:
        for section in SECTIONS:
            r = await api.client.get(f"/api/objects/{rev}", params={"section": section})
            out.append(r.content)
        for path in (f"/api/entries/{rev}/connections", f"/api/entries/{rev}/discussion"):
            out.append((await api.client.get(path)).content)
        root = (await api.client.get(f"/api/entries/{rev}")).json()["root"]
        cursor: str | None = None
        while True:  # the whole changes feed of the root, two items a page
            params = {"root": root, "limit": "2", **({"cursor": cursor} if cursor else {})}
            page = (await api.client.get("/api/changes", params=params)).json()
            out.append(orjson.dumps(page))
            cursor = page["cursor"]
            if not page["has_more"]:
                break
    size = await api.library.storage.read(tree_size)
    assert size > 10
    for index in range(size):  # every inclusion and consistency proof of the log
        for path, params in (("inclusion", {"index": index, "size": size}),
                             ("consistency", {"old": index + 1, "new": size})):
            r = await api.client.get(f"/api/log/proof/{path}", params=params)
            assert r.status_code == 200, r.text
            out.append(r.content)
    return out


async def test_a_library_closed_and_opened_again_reads_the_same(
    tmp_path: Path, founding: Founding, clock: Clock, db: Path | str
) -> None:
    async for api in serve_library(tmp_path, founding, clock, db=db):
        names = await publish_example(api)
        first = await api.publish("owner", _claim("Revised later"))
        revised = await api.publish("owner", {**_claim("Revised"), "previous": first["id"]})
        revisions = [*names.values(), first["id"], revised["id"]]
        before = await _reads(api, revisions)

    async for api in serve_library(tmp_path, founding, clock, documents=[], db=db):
        assert await _reads(api, revisions) == before
        own_feed = (f"SELECT count(*) FROM {feed.ROWS} f"
                    " JOIN revisions r ON r.sequence = f.sequence"
                    " JOIN revisions o ON o.sequence = f.owner WHERE r.root = o.id")
        if isinstance(db, str):  # PostgreSQL (its schema: tests/store/test_postgresql.py)
            with psycopg.connect(db, autocommit=True) as pg:
                row = pg.execute(own_feed).fetchone()
                assert row is not None and row[0] == 0
        else:
            conn = sqlite3.connect(db)
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            assert "closure" not in tables and "revisions_root" not in tables
            assert "merkle" not in tables and "merkle_nodes" in tables
            assert "revisions_later" in tables and "objects_contents" in tables
            assert "objects_head_sequence" in tables
            keyed = conn.execute("SELECT name FROM pragma_table_info('objects') WHERE pk = 1")
            assert keyed.fetchall() == [("created_sequence",)]
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute(own_feed).fetchone()[0] == 0
            conn.close()
        # and the migrated database goes on admitting: a reply deep in the example's thread
        reply = await api.publish("peer", objects_support.reply(names["reply"], "Afterwards"))
        changes = (await api.client.get("/api/changes", params={"root": reply["root"]})).json()
        assert [item["id"] for item in changes["items"]] == [reply["id"]]
        changes = (await api.client.get("/api/changes", params={"root": names["space"]})).json()
        assert changes["items"][-1]["id"] == reply["id"]


async def test_votes_and_children_are_read_through_their_indexes(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    """What admission writes beside the links and votes — each vote's target key, head id and
    target root, each voted object's score, each first revision's tree links with its object's
    head — is what the tables derive from (``schema.DERIVED_TABLES``), and the scores and
    children pages read it through their indexes."""
    async for api in serve_library(tmp_path, founding, clock):
        names = await publish_example(api)
        for i, (voter, target, value) in enumerate([
            ("peer", "claim", "1"), ("peer", "document", "-1"), ("owner", "claim", "1"),
            ("owner", "reply", "0"), ("peer", "space", "1"),
        ]):
            signed = await api.publish(voter, vote(names[target], value))
            names[f"vote {i}"] = signed["id"]
        await api.publish("peer", vote(names["claim"], "-1", previous=names["vote 0"]))
    conn = sqlite3.connect(tmp_path / "lib.db")
    try:
        votes = conn.execute("SELECT count(*) FROM vote_values").fetchone()[0]
        assert votes == 5
        assert conn.execute(
            "SELECT count(*) FROM vote_values v JOIN revisions h ON h.sequence = v.head_sequence"
            " JOIN objects o ON o.created_sequence = v.target_seq"
            " WHERE v.head = h.id AND v.target_root = o.root AND o.root = v.target"
        ).fetchone()[0] == votes
        assert conn.execute("SELECT * FROM object_scores ORDER BY 1").fetchall() == [
            tuple(r) for r in conn.execute(schema.OBJECT_SCORES_ROWS)]
        assert len(conn.execute("SELECT * FROM object_scores").fetchall()) == 4
        assert conn.execute("SELECT * FROM tree_heads ORDER BY 1, 2, 3").fetchall() == [
            tuple(r) for r in conn.execute(schema.TREE_HEADS_ROWS)]
        assert conn.execute("SELECT count(*) FROM tree_heads").fetchone()[0] > 0
        scores = " ".join(str(r[3]) for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT v.vote_root, v.head, v.target_root FROM vote_values v"
            " INDEXED BY vote_values_page JOIN objects o"
            " ON o.created_sequence = v.target_seq WHERE v.author_id = 1"
            " ORDER BY v.head_sequence DESC"))
        assert "USING INTEGER PRIMARY KEY" in scores and "root" not in scores
        assert "COVERING INDEX vote_values_page" in scores
        # SQLite uses a partial index only when the query repeats its condition
        children = " ".join(str(r[3]) for r in conn.execute(
            "EXPLAIN QUERY PLAN " + objects_reads._tree_arm("contained_in", False, heads=True),
            {"owner": 1}))
        assert children == "SEARCH tree_heads USING PRIMARY KEY (target_owner=? AND relation=?)"
        exact = " ".join(str(r[3]) for r in conn.execute(
            "EXPLAIN QUERY PLAN " + objects_reads._tree_arm("contained_in", True), {"seq": 1}))
        assert "links_to_revision" in exact
        related = [r[3] for r in conn.execute(
            "EXPLAIN QUERY PLAN " + objects_reads.related_incoming(False), {"owner": 1})]
        assert related[0] == "SEARCH l USING INDEX links_related (target_owner=?)"
        related = [r[3] for r in conn.execute(
            "EXPLAIN QUERY PLAN " + objects_reads.related_incoming(True), {"owner": 1, "seq": 1})]
        assert "links_to_revision" in related[0]
    finally:
        conn.close()


async def test_no_statement_scans_the_revisions(
    tmp_path: Path, founding: Founding, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Revisions are found by id through the index of id prefixes (``schema.revision_id``):
    every statement the server runs while admitting and reading a library — each read of
    ``_reads`` and the pages — searches ``revisions`` by an index, never scans it.  (The
    condition's ``CAST`` matters: without it SQLite rewrites the indexed expression away.)"""
    statements: set[str] = set()
    serving: list[bool] = []  # not the opening's one-time passes (a rebuild reads every row)
    connect = sqlite3.connect

    def traced(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)  # type: ignore[arg-type]
        conn.set_trace_callback(lambda sql: statements.add(sql) if serving else None)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    async for api in serve_library(tmp_path, founding, clock):
        serving.append(True)
        names = await publish_example(api)
        names["vote"] = (await api.publish("peer", vote(names["claim"], "1")))["id"]
        await _reads(api, list(names.values()))
        for path in ("/", *(f"/revisions/{rev}" for rev in names.values())):
            assert (await api.client.get(path)).status_code == 200
    monkeypatch.undo()
    conn = sqlite3.connect(tmp_path / "lib.db")
    # an object's ancestor spaces come from the covering index of spaces, not their rows
    spaces = [sql for sql in statements if "INDEXED BY objects_spaces" in sql]
    assert spaces
    for sql in spaces:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
        assert plan and all("COVERING INDEX objects_spaces" in line for line in plan), plan
    checked = 0
    for sql in statements:
        aliases = {"revisions", *(m.group(1) for m in re.finditer(
            r"\b(?:FROM|JOIN) revisions (?!WHERE|JOIN|ON)(\w+)", sql))}
        if "revisions" not in sql or not re.match(r"\s*(SELECT|UPDATE|INSERT|WITH)", sql):
            continue
        try:
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
        except sqlite3.Error:  # a statement of a temporary table, a savepoint's
            continue
        checked += 1
        scans = [line for line in plan if re.fullmatch(r"SCAN (\w+)", line)
                 and line.split()[1] in aliases]
        assert not scans, (sql, plan)
    assert checked > 20


def test_ids_sharing_a_prefix_are_told_apart() -> None:
    """Two revisions whose ids share the 16 hex digits ``revisions_id`` indexes: each lookup
    finds its own row, and an id neither has finds none."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema._REVISIONS.format(name="revisions")
                       + "CREATE INDEX revisions_id ON revisions(substr(id, 1, 16));")
    prefix = "ab" * 8
    ids = [prefix + c * 48 for c in "01"]
    for seq, rev in enumerate(ids, 1):
        conn.execute("INSERT INTO revisions VALUES (?, ?, ?, 'claim', 'a', 't', 'x', 1, 1, 0)",
                     (seq, rev, rev))
    sql = f"SELECT sequence FROM revisions WHERE {schema.revision_id('?')}"
    assert [conn.execute(sql, (rev, rev)).fetchall() for rev in ids] == [[(1,)], [(2,)]]
    assert conn.execute(sql, (prefix + "2" * 48,) * 2).fetchall() == []
    assert "revisions_id" in conn.execute(f"EXPLAIN QUERY PLAN {sql}", (ids[0],) * 2).fetchone()[3]
