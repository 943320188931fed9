"""Storage behaviour that the HTTP tests do not pin down.  The tests taking ``api`` or ``db``
run on both backends; the migration of an earlier SQLite index layout is about SQLite files
(PostgreSQL's migrations are tested in tests/store/test_postgresql.py)."""

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


# A database of an earlier layout holds leaves of the earlier format and is refused when opened
# (tests/store/test_leaf_format.py): there is no layout migration left to test, only a reopening.
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


# Every layout before issue 22's sixth round: the scores page read each vote's head id from its
# revision and its target's root from the target's object row.
_BEFORE_VOTE_PAGE = """
DROP TABLE object_scores;
DROP INDEX vote_values_page;
ALTER TABLE vote_values DROP COLUMN head;
ALTER TABLE vote_values DROP COLUMN target_root;
CREATE INDEX vote_values_by_target_seq ON vote_values(author_id, head_sequence, target_seq, value);
"""
# The index layout before issue 22's: every link in two indexes by its target, the scores page
# read through a narrow index of vote roots, votes naming their targets by root only.
_EARLIER_INDEXES = """
DROP INDEX links_tree;
DROP INDEX links_to_revision;
CREATE INDEX links_incoming ON links(target, source_sequence) WHERE relation != 'votes_on';
DROP INDEX vote_values_by_target_seq;
ALTER TABLE vote_values DROP COLUMN target_seq;
CREATE INDEX links_target ON links(target, relation);
CREATE INDEX links_target_root ON links(target_root, relation);
CREATE INDEX vote_values_author ON vote_values(author_id, head_sequence);
"""
# The layout of issue 22's first round: votes still without their targets' integer keys.
_FIRST_ROUND_INDEXES = """
DROP INDEX vote_values_by_target_seq;
ALTER TABLE vote_values DROP COLUMN target_seq;
CREATE INDEX vote_values_by_author ON vote_values(author_id, head_sequence, target, value);
"""


# Every layout before issue 22's fourth round keyed links, ``feed`` and ``deep`` by 64-hex
# roots and revision ids (its near lists too, which the rebuild rewrites whatever they hold).
_ROOT_KEYED = f"""
ALTER TABLE links ADD COLUMN target_root TEXT NOT NULL DEFAULT '';
UPDATE links SET target_root =
    (SELECT root FROM objects WHERE created_sequence = links.target_owner);
DROP TABLE tree_heads;
DROP INDEX links_related;
DROP INDEX links_to_revision;
DROP INDEX links_relationships;
ALTER TABLE links DROP COLUMN target_seq;
ALTER TABLE links DROP COLUMN target_owner;
CREATE INDEX links_tree ON links(target_root, relation) WHERE relation IN {schema.TREE_LINKS};
CREATE INDEX links_related ON links(target_root, source_sequence)
    WHERE relation NOT IN {schema.NOT_RELATED};
CREATE INDEX links_to_revision ON links(target, source_sequence, position, relation)
    WHERE relation != 'votes_on';
CREATE INDEX links_relationships ON links(target_root, source_sequence)
    WHERE relation IN ('relates_from', 'relates_to');
CREATE TABLE feed_by_root AS SELECT o.root AS root, f.sequence AS sequence FROM {feed.ROWS} f
    JOIN objects o ON o.created_sequence = f.owner;
DROP TABLE feed;
DROP TABLE feed_recent;
ALTER TABLE feed_by_root RENAME TO feed;
UPDATE meta SET value = 'near-conversation-1/64' WHERE key = 'feed_layout';
"""

# Every layout before issue 22's third round indexed the objects by root (``UNIQUE``), beside
# the index of revision ids that finds them now (``schema.object_row``).
_ROOT_INDEXED = (
    schema._OBJECTS.format(name="objects_earlier").replace("root TEXT NOT NULL,",
                                                           "root TEXT NOT NULL UNIQUE,")
    + "INSERT INTO objects_earlier SELECT * FROM objects;\n"
    + "DROP TABLE objects;\nALTER TABLE objects_earlier RENAME TO objects;\n"
    + schema._OBJECT_INDEXES
)

# revisions found through an index of whole ids (UNIQUE), before ``revisions_id``
_ID_INDEXED = (
    schema._REVISIONS.format(name="revisions_earlier").replace("id TEXT NOT NULL,",
                                                               "id TEXT NOT NULL UNIQUE,")
    + "INSERT INTO revisions_earlier SELECT * FROM revisions;\n"
    + "DROP TABLE revisions;\nALTER TABLE revisions_earlier RENAME TO revisions;\n"
    + "CREATE INDEX revisions_tree ON revisions(tree, sequence) WHERE tree != 0;\n"
    + "CREATE INDEX revisions_later ON revisions(root, sequence) WHERE id != root;\n"
)


def _objects(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    """Every ``objects`` row, its near list as a set (the rebuild of the feed layout may list
    an object's ancestors in another order)."""
    at = schema.OBJECT_COLUMNS.index("ancestors")
    return [(*row[:at], frozenset(row[at].split()), *row[at + 1:]) for row in conn.execute(
        f"SELECT {', '.join(schema.OBJECT_COLUMNS)} FROM objects ORDER BY created_sequence")]


@pytest.mark.parametrize("earlier", [_EARLIER_INDEXES, _FIRST_ROUND_INDEXES, ""],
                         ids=["before-issue-22", "issue-22-first-round", "issue-22-second-round"])
async def test_a_library_of_the_earlier_index_layout_is_migrated_when_opened(
    tmp_path: Path, founding: Founding, clock: Clock, earlier: str
) -> None:
    actors = [founding.participants[name].actor for name in ("owner", "peer")]

    async def reads(api: Api, revisions: list[str]) -> list[bytes]:
        out = await _reads(api, revisions)
        for actor in actors:
            for offset in ("0", "1"):
                r = await api.client.get("/api/scores", params={"author": actor, "offset": offset})
                out.append(r.content)
        return out

    async for api in serve_library(tmp_path, founding, clock):
        names = await publish_example(api)
        for i, (voter, target, value) in enumerate([
            ("peer", "claim", "1"), ("peer", "document", "-1"), ("owner", "claim", "1"),
            ("owner", "reply", "0"), ("peer", "space", "1"),
        ]):
            signed = await api.publish(voter, vote(names[target], value))
            names[f"vote {i}"] = signed["id"]
        changed = await api.publish("peer", vote(names["claim"], "-1", previous=names["vote 0"]))
        revisions = [*names.values(), changed["id"]]
        before = await reads(api, revisions)
    conn = sqlite3.connect(tmp_path / "lib.db")
    objects = _objects(conn)
    revision_rows = conn.execute("SELECT * FROM revisions ORDER BY sequence").fetchall()
    conn.executescript(_BEFORE_VOTE_PAGE + _ROOT_KEYED + earlier + _ROOT_INDEXED + _ID_INDEXED)
    assert earlier == "" or "target_seq" not in {
        r[1] for r in conn.execute("PRAGMA table_info(vote_values)")}
    for table in ("objects", "revisions"):
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE"
                            f" 'sqlite_autoindex_{table}_%'").fetchone()[0] == 1
    conn.close()

    async for api in serve_library(tmp_path, founding, clock, documents=[]):
        assert await reads(api, revisions) == before
        conn = sqlite3.connect(tmp_path / "lib.db")
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert not indexes & set(schema.RETIRED_INDEXES)
        # the objects, rebuilt without their index of roots, each row as it was
        assert not any(name.startswith("sqlite_autoindex_objects") for name in indexes)
        assert {"objects_head_sequence", "objects_contents", "objects_spaces"} <= indexes
        assert _objects(conn)[:len(objects)] == objects
        assert {"links_to_revision", "vote_values_page"} <= indexes
        # the revisions, rebuilt without their index of whole ids, found by their prefixes
        assert not any(name.startswith("sqlite_autoindex_revisions") for name in indexes)
        assert {"revisions_id", "revisions_tree", "revisions_later"} <= indexes
        assert conn.execute("SELECT * FROM revisions ORDER BY sequence").fetchall()[
            :len(revision_rows)] == revision_rows
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # links keyed by integers, each naming its target's sequence and object
        columns = tuple(r[1] for r in conn.execute("PRAGMA table_info(links)"))
        assert columns == schema.LINK_COLUMNS
        assert conn.execute(
            "SELECT count(*) FROM links l JOIN revisions t ON t.sequence = l.target_seq"
            " JOIN revisions o ON o.sequence = l.target_owner"
            " WHERE t.id != l.target OR o.id != t.root").fetchone()[0] == 0
        assert conn.execute("SELECT value FROM meta WHERE key = 'feed_layout'").fetchone()[0] \
            == feed.layout()
        # every vote names its target's integer key, filled when the column was added
        votes = conn.execute("SELECT count(*) FROM vote_values").fetchone()[0]
        assert votes == 5
        assert conn.execute(
            "SELECT count(*) FROM vote_values v JOIN objects o"
            " ON o.created_sequence = v.target_seq AND o.root = v.target").fetchone()[0] == votes
        scores = " ".join(str(r[3]) for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT v.vote_root, v.head, v.target_root FROM vote_values v"
            " INDEXED BY vote_values_page JOIN objects o"
            " ON o.created_sequence = v.target_seq WHERE v.author_id = 1"
            " ORDER BY v.head_sequence DESC"))
        assert "USING INTEGER PRIMARY KEY" in scores and "root" not in scores
        assert "COVERING INDEX vote_values_page" in scores
        # and each its head's id and its target's root, filled when the columns were added
        assert conn.execute(
            "SELECT count(*) FROM vote_values v JOIN revisions h ON h.sequence = v.head_sequence"
            " JOIN objects o ON o.created_sequence = v.target_seq"
            " WHERE v.head = h.id AND v.target_root = o.root").fetchone()[0] == votes
        # and each voted object's score, summed from them when the table was added
        assert conn.execute("SELECT * FROM object_scores ORDER BY 1").fetchall() == [
            tuple(r) for r in conn.execute(schema.OBJECT_SCORES_ROWS)]
        assert len(conn.execute("SELECT * FROM object_scores").fetchall()) == 4
        # the reads take the new indexes: SQLite uses a partial index only when the query
        # repeats its condition
        children = " ".join(str(r[3]) for r in conn.execute(
            "EXPLAIN QUERY PLAN " + objects_reads._tree_arm("contained_in", False, heads=True),
            {"owner": 1}))
        assert children == "SEARCH tree_heads USING PRIMARY KEY (target_owner=? AND relation=?)"
        # tree_heads filled from the links and objects: each first revision's tree links,
        # with its object's head (the revision of the claim and the votes' changes included)
        assert conn.execute("SELECT * FROM tree_heads ORDER BY 1, 2, 3").fetchall() == [
            tuple(r) for r in conn.execute(schema.TREE_HEADS_ROWS)]
        assert conn.execute("SELECT count(*) FROM tree_heads").fetchone()[0] > 0
        exact = " ".join(str(r[3]) for r in conn.execute(
            "EXPLAIN QUERY PLAN " + objects_reads._tree_arm("contained_in", True),
            {"seq": 1}))
        assert "links_to_revision" in exact
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
