"""PostgreSQL: stateless nodes on one database (docs/deployment.md "Several nodes").

Real ``alexandria serve`` processes on 127.0.0.1 against one database of the session's
throwaway cluster: races between nodes, a storm of one envelope, a write on one node read on
another, a changes cursor carried from one node to the other, checkpoints signed by several
nodes; and the connection dialect and schema the read models rely on.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from alexandria.core import merkle
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.errors import Malformed
from alexandria.reads import objects as objects_reads
from alexandria.service.bootstrap import Founding, found_library
from alexandria.store import feed
from alexandria.store import schema as sqlite_schema
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.merkle_nodes import LEAVES, log_root, node_reader
from alexandria.store.postgresql import is_database_url
from alexandria.store.postgresql import schema as pg_schema
from alexandria.store.postgresql.connection import PgConnection, translate
from alexandria.store.postgresql.migrate import MigrationFailed, migrate
from alexandria.store.postgresql.schema import _schema_sql
from alexandria.store.postgresql.storage import PostgresBackend
from tests.support import objects as objects_support
from tests.support.catalogue import document, publish_example, vote
from tests.support.cli import cli, cli_json
from tests.support.library import Api, Clock, serve_library
from tests.support.live import admit_authorities, claim_revision, post_at
from tests.support.liveserver import serving, write_library_files
from tests.support.pgcluster import Cluster, cluster, standby

pytestmark = pytest.mark.slow


@pytest.fixture
def pg_db(pg_cluster: Cluster) -> str:
    return pg_cluster.database()


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def _race(urls: list[str], bodies: list[bytes]) -> list[tuple[int, Any]]:
    """POST every body at the same instant, alternating between ``urls``, from processes."""
    q: Any = multiprocessing.Queue()
    start = time.time() + 1.5
    procs = [multiprocessing.Process(target=post_at, args=(urls[i % len(urls)], body, start, q))
             for i, body in enumerate(bodies)]
    for p in procs:
        p.start()
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join()
    return results


def _gapless(url: str) -> int:
    sequences = [r[0] for r in _rows(url, "SELECT sequence FROM log ORDER BY sequence")]
    assert sequences == list(range(1, len(sequences) + 1))
    return len(sequences)


@pytest.mark.parametrize("workers", [1, 2])
def test_racing_revisions_across_two_nodes_one_wins(
    tmp_path: Path, founding: Founding, pg_db: str, workers: int
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    owner = founding.participants["owner"]
    base = now_ms() - 60_000
    with serving(genesis, pg_db, log_key, workers) as a, serving(genesis, pg_db, log_key) as b:
        admit_authorities(a.url, founding)
        first = owner.envelope(founding.genesis, claim_revision(0), format_ms(base))
        r = httpx.post(f"{a.url}/api/entries", content=json.dumps(first).encode())
        assert r.status_code == 201, r.text
        head = r.json()["id"]
        bodies = [json.dumps(owner.envelope(founding.genesis, claim_revision(i, head),
                                            format_ms(base + i))).encode()
                  for i in range(1, 13)]
        results = _race([a.url, b.url], bodies)
        winners = [body for status, body in results if status == 201]
        assert len(winners) == 1, results
        assert all(status == 409 and body["code"] == "HEAD_CONFLICT"
                   for status, body in results if status != 201), results
        assert httpx.get(f"{b.url}/api/entries/{head}/head").json()["id"] == winners[0]["id"]
        assert httpx.get(f"{a.url}/api/entries/{head}/head").json()["id"] == winners[0]["id"]
    assert _gapless(pg_db) == 2 + 1 + 1


def test_a_storm_of_one_envelope_admits_it_once(
    tmp_path: Path, founding: Founding, pg_db: str
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    owner = founding.participants["owner"]
    with serving(genesis, pg_db, log_key) as a, serving(genesis, pg_db, log_key) as b:
        admit_authorities(a.url, founding)
        body = json.dumps(owner.envelope(founding.genesis, claim_revision(0),
                                         format_ms(now_ms() - 1000))).encode()
        results = _race([a.url, b.url], [body] * 16)
        statuses = sorted(status for status, _ in results)
        assert statuses == [200] * 15 + [201], results
        assert len({json.dumps(answer, sort_keys=True) for _, answer in results}) == 1
    assert _gapless(pg_db) == 3


def test_two_nodes_share_writes_and_changes_cursors(
    tmp_path: Path, founding: Founding, pg_db: str, pg_cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    owner = founding.participants["owner"]
    base = now_ms() - 60_000
    # node b names the same database the libpq way: postgresql:///NAME, the rest from PG*
    monkeypatch.setenv("PGHOST", pg_cluster.socket)
    monkeypatch.setenv("PGUSER", "postgres")
    by_name = "postgresql:///" + urlsplit(pg_db).path.lstrip("/")
    with serving(genesis, pg_db, log_key) as a, serving(genesis, by_name, log_key) as b, \
            httpx.Client(timeout=30) as client:
        admit_authorities(a.url, founding)
        space = {"kind": "space", "title": "Shared nodes", "links": [], "previous": "",
                 "body": {"summary": "Written on one node, read on the other"}}
        r = client.post(f"{a.url}/api/entries", content=json.dumps(
            owner.envelope(founding.genesis, space, format_ms(base))).encode())
        assert r.status_code == 201, r.text
        root = r.json()["id"]
        ids = []
        for i in range(5):
            claim = claim_revision(i) | {"links": [{"relation": "contained_in", "target": root}]}
            node = (a, b)[i % 2]
            r = client.post(f"{node.url}/api/entries", content=json.dumps(
                owner.envelope(founding.genesis, claim, format_ms(base + 1 + i))).encode())
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        # a write on either node is read on the other
        for rev in ids:
            assert client.get(f"{a.url}/api/entries/{rev}").status_code == 200
            assert client.get(f"{b.url}/api/entries/{rev}").status_code == 200
        found = client.get(f"{b.url}/api/catalogue", params={"q": "statement"}).json()
        assert {item["id"] for item in found["items"]} == set(ids)
        # a cursor from one node continues on the other (secret and epoch in the database)
        page = client.get(f"{a.url}/api/changes", params={"root": root, "limit": 2}).json()
        seen = [item["id"] for item in page["items"]]
        while page["has_more"]:
            node = b if len(seen) % 4 == 2 else a
            page = client.get(f"{node.url}/api/changes",
                              params={"root": root, "limit": 2, "cursor": page["cursor"]}).json()
            seen += [item["id"] for item in page["items"]]
        assert seen == [root, *ids]
        late = claim_revision(9) | {"links": [{"relation": "contained_in", "target": root}]}
        r = client.post(f"{a.url}/api/entries", content=json.dumps(
            owner.envelope(founding.genesis, late, format_ms(base + 100))).encode())
        page = client.get(f"{b.url}/api/changes",
                          params={"root": root, "cursor": page["cursor"]}).json()
        assert [item["id"] for item in page["items"]] == [r.json()["id"]]


def test_checkpoints_signed_by_several_nodes_are_consistent(
    tmp_path: Path, founding: Founding, pg_db: str
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    owner = founding.participants["owner"]
    base = now_ms() - 60_000
    with serving(genesis, pg_db, log_key) as a, serving(genesis, pg_db, log_key) as b, \
            httpx.Client(timeout=30) as client:
        admit_authorities(a.url, founding)
        notes = []
        for i in range(8):
            for node in (a, b):
                claim = claim_revision(i) | {"title": f"Claim {i} on {node.port}"}
                r = client.post(f"{node.url}/api/entries", content=json.dumps(owner.envelope(
                    founding.genesis, claim, format_ms(base + i))).encode())
                assert r.status_code == 201, r.text
                notes.append(client.get(f"{node.url}/api/log/checkpoint").text)
    stored = _rows(pg_db, "SELECT size, root, note FROM checkpoints ORDER BY size")
    assert len(stored) >= 2
    leaves = [bytes(r[0]) for r in _rows(pg_db, "SELECT leaf FROM log ORDER BY sequence")]
    for size, root, note in stored:
        assert merkle.root_from_leaves([merkle.leaf_hash(x) for x in leaves[:size]]) == bytes(root)
        assert parse_checkpoint(note)[0].size == size
    for note in notes:  # every checkpoint a node served is one the database holds
        assert note in {n for _s, _r, n in stored}


def test_the_schema_matches_sqlites_columns(pg_db: str) -> None:
    """The read models run on both: every SQLite table (but the full-text index's: FTS5's and
    the heads' words) has PostgreSQL's columns."""
    lite = sqlite3.connect(":memory:")
    lite.executescript(sqlite_schema.TABLES)
    tables = [r[0] for r in lite.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE '%VIRTUAL%'"
        " AND name NOT LIKE 'catalogue_text%' AND name NOT LIKE 'catalogue_levels%'"
        " AND name != 'catalogue_words'")]
    assert "catalogue" in tables
    with psycopg.connect(pg_db, autocommit=True) as pg:  # migrated to ``VERSION``
        for table in tables:
            mine = [r[1] for r in lite.execute(f"PRAGMA table_info({table})")]
            theirs = [r[0] for r in pg.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                " ORDER BY ordinal_position", (table,))]
            assert mine == theirs, table
    assert sqlite_schema.NOT_RELATED.replace("'", "") in pg_schema.INTEGER_KEYS.replace(
        "'", "").replace("\n    ", " ")
    assert sqlite_schema.TREE_LINKS.replace("'", "") in pg_schema.INTEGER_KEYS.replace(
        "'", "").replace("\n    ", " ")


def test_the_related_section_reads_through_its_partial_indexes(pg_db: str) -> None:
    """The related section's query says the condition of ``links_related`` as comparisons
    (``schema.related_link``: SQLite's index since its version 2); PostgreSQL's index keeps
    ``NOT IN`` and its planner proves it from them."""
    plans = {}
    with psycopg.connect(pg_db, autocommit=True) as pg:
        pg.execute("SET enable_seqscan = off")  # the tables are empty: any index is usable
        pg.execute("SET enable_bitmapscan = off")
        for exact in (False, True):
            sql = translate(objects_reads.related_incoming(exact))
            plans[exact] = " ".join(str(r[0]) for r in pg.execute(
                f"EXPLAIN {sql}", {"owner": 1, "seq": 1}))
    assert "Index Only Scan using links_related on links" in plans[False]
    assert "using links_to_revision on links" in plans[True]


#: indexes of schema versions 1 to 9 that later versions dropped
_RETIRED_INDEXES = ("links_target", "links_target_root", "links_incoming", "vote_values_author",
                    "vote_values_by_author", "links_tree", "vote_values_by_target_seq")


def test_a_database_of_schema_version_1_is_migrated_to_issue_22s_indexes(
        pg_cluster: Cluster) -> None:
    """Issue 22's index layout, the covering search postings, the feed keyed by objects keys
    and the leaves' record pieces reach a database made before them, once (``MIGRATIONS``)."""
    empty = pg_cluster.database(migrated=False)  # not the session's migrated template
    with psycopg.connect(empty, autocommit=True) as raw:
        raw.execute("CREATE TABLE schema_migrations(version INTEGER PRIMARY KEY,"
                    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        raw.execute(_schema_sql().encode())
        raw.execute("INSERT INTO schema_migrations(version) VALUES (1)")
        # version 1's log: the leaves alone
        raw.execute("ALTER TABLE log DROP COLUMN id, DROP COLUMN root, DROP COLUMN record_length,"
                    " DROP COLUMN authority_seq")

        def indexes() -> set[str]:
            return {r[0] for r in raw.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename IN ('links', 'vote_values')")}

        def postings_key() -> str:
            row = raw.execute("SELECT indexdef FROM pg_indexes"
                              " WHERE indexname = 'catalogue_postings_pkey'").fetchone()
            assert row is not None
            return str(row[0])

        # vote_values_by_author came with version 3 and went with version 4, links_tree
        # (version 3, on roots) with version 9, vote_values_by_target_seq (version 4) with 10
        assert set(_RETIRED_INDEXES) - {
            "vote_values_by_author", "links_tree", "vote_values_by_target_seq"} <= indexes()
        assert "INCLUDE" not in postings_key()
        assert raw.execute("SELECT count(*) FROM pg_indexes WHERE indexname ="
                           " 'catalogue_postings_seq'").fetchone() == (1,)
        # two heads' postings (version 13 turns them into their levels): 3 × title + body
        raw.execute("INSERT INTO catalogue_postings(term, seq, title_count, body_count)"
                    " VALUES ('beta', 7, 0, 63), ('alpha', 7, 1, 2), ('zeta', 7, 2, 60),"
                    " ('alpha', 9, 0, 64), ('ⅻ', 9, 0, 1)")
        assert pg_schema.apply(raw) == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
        for table, columns in (("log", ["sequence", "type", "leaf", "leaf_hash", "admitted_at",
                                        "id", "root", "record_length", "authority_seq"]),
                               ("feed", ["owner", "sequence"]),
                               ("feed_recent", ["owner", "sequence"]), ("links", [
                "source_sequence", "position", "relation", "target", "target_seq",
                "target_owner"])):
            assert [r[0] for r in raw.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                " ORDER BY ordinal_position", (table,))] == columns
        assert not indexes() & set(_RETIRED_INDEXES)
        assert raw.execute("SELECT to_regclass('catalogue_postings')").fetchone() == (None,)
        # version 14: no heads' words; new leaves and tokens compressed with LZ4
        assert raw.execute("SELECT to_regclass('catalogue_words')").fetchone() == (None,)
        assert raw.execute(
            "SELECT attrelid::regclass::text, attname, attcompression FROM pg_attribute"
            " WHERE attcompression != '' ORDER BY 1, 2").fetchall() == [
            ("catalogue_levels", "tokens", "l"), ("log", "leaf", "l")]
        assert raw.execute("SELECT seq, tokens, over FROM catalogue_levels ORDER BY seq"
                           ).fetchall() == [(7, "alpha·5 beta·63 zeta·64", "zeta·66"),
                                            (9, "alpha·64 ⅻ·1", "alpha·64")]
        assert {r[0] for r in raw.execute("SELECT indexname FROM pg_indexes WHERE tablename ="
                                          " 'catalogue_levels'")} == {
            "catalogue_levels_pkey", "catalogue_levels_tokens"}
        assert {"links_to_revision", "vote_values_page"} <= indexes()
        assert "links_tree" not in indexes()  # version 9: the table tree_heads instead
        assert raw.execute("SELECT to_regclass('tree_heads')").fetchone() == ("tree_heads",)
        assert raw.execute("SELECT stxname FROM pg_statistic_ext").fetchall() == [
            ("catalogue_facet_kind",)]
        assert pg_schema.apply(raw) == []


def test_migrations_4_and_10_give_the_votes_already_there_their_targets_keys_and_heads(
        pg_cluster: Cluster) -> None:
    """A database of version 3 (votes naming their targets by root only) is given
    ``vote_values.target_seq``, filled from ``objects``, then (version 10) each vote's head id
    and target's root, and the scores page's index covering them."""
    empty = pg_cluster.database(migrated=False)
    with psycopg.connect(empty, autocommit=True) as raw:
        raw.execute("CREATE TABLE schema_migrations(version INTEGER PRIMARY KEY,"
                    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        raw.execute(_schema_sql().encode())
        raw.execute(pg_schema.TREE_LINKS_AND_COVERING_VOTES.encode())
        raw.execute("ALTER TABLE vote_values DROP COLUMN target_seq")
        raw.execute("INSERT INTO schema_migrations(version) VALUES (1), (2), (3)")
        for seq, root in ((7, "a" * 64), (9, "b" * 64)):
            raw.execute(
                "INSERT INTO objects(created_sequence, root, kind, author, head, head_sequence,"
                " revisions, depth, parent, vote_target, feed_links)"
                " VALUES (%s, %s, 'claim', 'x', %s, %s, 1, 0, '', '', '')",
                (seq, root, root, seq))
        for seq in (20, 21):  # the votes' heads
            raw.execute(
                "INSERT INTO revisions(sequence, id, root, kind, author, authored_at, title,"
                " record_length, authority_seq) VALUES (%s, %s, %s, 'vote', 'x', '', '', 1, 1)",
                (seq, f"h{seq}", f"v{seq}"))
        raw.execute("INSERT INTO vote_values(vote_root, author_id, target, value, head_sequence)"
                    " VALUES ('v1', 1, %s, 1, 20), ('v2', 1, %s, -1, 21)", ("b" * 64, "a" * 64))
        assert pg_schema.apply(raw) == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
        rows = raw.execute("SELECT vote_root, target_seq, head, target_root FROM vote_values"
                           " ORDER BY vote_root")
        assert rows.fetchall() == [("v1", 9, "h20", "b" * 64), ("v2", 7, "h21", "a" * 64)]
        # version 11: each voted object's score
        assert raw.execute("SELECT * FROM object_scores ORDER BY 1").fetchall() == [
            (7, -1), (9, 1)]
        indexes = {r[0] for r in raw.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'vote_values'")}
        assert "vote_values_page" in indexes
        assert not indexes & {"vote_values_by_target_seq", "vote_values_by_author"}
        assert pg_schema.apply(raw) == []


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = %s AND c = %s"),
    ("SELECT s FROM x WHERE root = :root LIMIT :n",
     "SELECT s FROM x WHERE root = %(root)s LIMIT %(n)s"),
    ("SELECT '50%', '?', ':x' FROM t WHERE a LIKE ?",
     "SELECT '50%%', '?', ':x' FROM t WHERE a LIKE %s"),
    ("SELECT seq FROM catalogue INDEXED BY catalogue_kind WHERE kind = ?",
     "SELECT seq FROM catalogue WHERE kind = %s"),
    ("SELECT seq FROM catalogue NOT INDEXED ORDER BY seq",
     "SELECT seq FROM catalogue ORDER BY seq"),
    ("INSERT OR IGNORE INTO v(a) VALUES (?)",
     "INSERT INTO v(a) VALUES (%s) ON CONFLICT DO NOTHING"),
    ("BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ"),
    ("SELECT x::text", "SELECT x::text"),
])
def test_statements_are_translated(sql: str, expected: str) -> None:
    assert translate(sql) == expected


async def test_reads_run_without_jit_and_read_pages_in_few_statements(api: Api) -> None:
    """Every connection turns JIT off (``connection.configure``): a plan's compilation would
    cost more than these reads.  A changes page, an inclusion proof and a page of summaries
    each read their records or Merkle nodes with one statement, not one per item (each
    statement is a round trip to the server)."""
    storage = api.library.storage
    if not isinstance(storage, LedgerStorage) or not isinstance(storage.backend, PostgresBackend):
        pytest.skip("PostgreSQL's connections")
    assert await storage.read(lambda conn: conn.execute("SHOW jit").fetchone()[0]) == "off"
    root = (await api.publish("owner", objects_support.space("Orchard")))["id"]
    for i in range(12):
        await api.publish("owner", objects_support.claim(f"Apple {i}", root))
    counted: list[str] = []
    execute = PgConnection.execute

    def counting(self: PgConnection, sql: str, params: Any = ()) -> Any:
        counted.append(sql)
        return execute(self, sql, params)

    size = await storage.log_size()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PgConnection, "execute", counting)
        for path, params in (("/api/changes", {"root": root}),
                             ("/api/log/proof/inclusion", {"index": "3", "size": str(size)}),
                             ("/api/catalogue", {"projection": "summary"})):
            counted.clear()
            r = await api.client.get(path, params=params)
            assert r.status_code == 200, r.text
            assert len(counted) <= 12, (path, counted)
            assert sum("merkle_nodes" in sql for sql in counted) <= 1, (path, counted)
            assert sum("JOIN log" in sql for sql in counted) <= 1, (path, counted)
    assert len(r.json()["items"]) == 13


async def test_long_values_are_compressed_with_lz4_and_a_revision_leaves_no_words(
        api: Api) -> None:
    """A leaf and a head's tokens long enough to be stored out of line are compressed with LZ4
    (schema version 14); the words of a head are not stored on PostgreSQL, and a revision
    forgets its predecessor's levels by its sequence."""
    storage = api.library.storage
    if not isinstance(storage, LedgerStorage) or not isinstance(storage.backend, PostgresBackend):
        pytest.skip("PostgreSQL's storage")
    words = " ".join(f"word{i} " * (i % 5 + 1) for i in range(600))
    d = await api.publish("owner", document("Long", words))
    d2 = await api.publish("owner", document("Longer", words + " tail", previous=d["id"]))

    def read(conn: Any) -> list[Any]:
        return [conn.execute(sql).fetchall() for sql in (
            "SELECT DISTINCT pg_column_compression(leaf) FROM log WHERE length(leaf) > 4000",
            "SELECT DISTINCT pg_column_compression(tokens) FROM catalogue_levels"
            " WHERE length(tokens) > 4000",
            "SELECT count(*) FROM catalogue_levels WHERE tokens LIKE '%word599%'",
            "SELECT to_regclass('catalogue_words')")]

    assert await storage.read(read) == [[("lz4",)], [("lz4",)], [(1,)], [(None,)]]
    page = (await api.client.get("/api/catalogue", params={"q": "word599 tail"})).json()
    assert [i["id"] for i in page["items"]] == [d2["id"]]
    assert (await api.client.get("/api/catalogue", params={"q": "word7"})).json()["total"] == 1


def test_database_urls() -> None:
    assert is_database_url("postgresql:///library")
    assert is_database_url("postgres://user@db.internal/library")
    assert not is_database_url("library.db")
    assert not is_database_url(Path("postgresql:/x"))


# --- alexandria migrate, and the catalogue's answers on both backends ---------------------------

_WORDS = ("claim", "evidence", "old", "words", "alpha", "beta", "gamma", "the", "a", "of",
          "reply", "branch", "ünïcode", "Ⅻ", "zzz")


async def _library_with_everything(api: Api) -> None:
    await publish_example(api)
    d = await api.publish("owner", document("Old words of the alpha", "alpha beta alpha the"))
    await api.publish("owner", document("New words", "gamma the gamma", previous=d["id"]))
    for i in range(12):
        await api.publish(("owner", "peer")[i % 2], document(
            f"Doc {i} {'alpha ' * (i % 3)}ünïcode", f"the {'beta ' * (i % 4)}Ⅻ words {i}"))
    # levels about PostgreSQL's CAP (64), the one past it read from ``over``: alpha 3 + 61 = 64
    # and 3 + 70 = 73 (above beta's 63), zzz 63, 64 and 65
    for alphas, zzzs in ((61, 63), (70, 65), (0, 64)):
        await api.publish("owner", document("Alpha", f"{'alpha ' * alphas}{'zzz ' * zzzs}"))
    v = await api.publish("peer", vote(d["id"], "1"))
    await api.publish("peer", vote(d["id"], "-1", previous=v["id"]))
    assert (await api.client.get("/api/log/checkpoint")).status_code == 200


def _queries() -> list[dict[str, str]]:
    out: list[dict[str, str]] = [{}, {"sort": "top"}, {"kind": "document"}, {"view": "feed"}]
    for i, w in enumerate(_WORDS):
        for sort in ("relevance", "new", "top"):
            out.append({"q": w, "sort": sort})
            out.append({"q": f"{w} {_WORDS[(i + 3) % len(_WORDS)]}", "sort": sort})
        out.append({"q": w, "kind": "document", "offset": "1"})
        for offset in ("1", "2", "4"):  # pages that start inside a level, and past the cap's
            out.append({"q": w, "sort": "relevance", "offset": offset})
        out.append({"q": w.upper(), "projection": "summary"})
    return out


async def test_migrate_keeps_the_root_and_the_same_answers(
    tmp_path: Path, founding: Founding, clock: Clock, pg_cluster: Cluster
) -> None:
    """The differential test of the two backends: one library, migrated, asked the catalogue's
    query corpus (every word must match; title 3, body 1; ties newest; normalised) on both."""
    lite = tmp_path / "lib.db"
    url = pg_cluster.database()
    answers: dict[str, Any] = {}
    async for api in serve_library(tmp_path, founding, clock, db=lite):
        await _library_with_everything(api)
        for q in _queries():
            answers[json.dumps(q)] = (await api.client.get("/api/catalogue", params=q)).json()
        answers["checkpoint"] = (await api.client.get("/api/log/checkpoint")).text
        top = answers[json.dumps({})]["items"][-1]["id"]
        page = (await api.client.get("/api/changes", params={"root": top, "limit": 1})).json()
    with sqlite3.connect(lite) as conn:  # feed rows still staged go to PostgreSQL's feed
        feed_rows = set(conn.execute(f"SELECT owner, sequence FROM {feed.ROWS}"))
        assert conn.execute("SELECT count(*) FROM feed_recent").fetchone()[0] > 0
    result = migrate(lite, url)
    assert result.size == parse_checkpoint(answers["checkpoint"])[0].size == result.checkpoint
    with psycopg.connect(url) as pg:
        assert set(pg.execute("SELECT owner, sequence FROM feed")) == feed_rows
        assert pg.execute("SELECT count(*) FROM feed_recent").fetchone() == (0,)
    async for api in serve_library(tmp_path, founding, clock, documents=[], db=url):
        for q in _queries():
            got = (await api.client.get("/api/catalogue", params=q)).json()
            assert got == answers[json.dumps(q)], q
        assert (await api.client.get("/api/log/checkpoint")).text == answers["checkpoint"]
        # a cursor issued by the SQLite library is honoured after the move
        r = await api.client.get("/api/changes", params={"root": top, "cursor": page["cursor"]})
        assert r.status_code == 200, r.text
    with pytest.raises(Malformed) as refused:
        migrate(lite, url)
    assert refused.value.code == "TARGET_NOT_EMPTY"


def test_migrate_command(tmp_path: Path, founding: Founding, pg_cluster: Cluster) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    lite = tmp_path / "lib.db"
    with serving(genesis, lite, log_key) as s:
        admit_authorities(s.url, founding)
    url = pg_cluster.database(migrated=False)  # as `createdb` leaves it
    out = cli_json("migrate", "--db", str(lite), "--to", url)
    assert out["size"] == len(founding.authority_documents())
    bad = cli("migrate", "--db", str(lite), "--to", "lib2.db", expect=None)
    assert bad.returncode != 0 and "USAGE" in bad.stderr + bad.stdout


def _tamper_leaf(db: Path, sequence: int) -> None:
    """Change one digit of leaf ``sequence``'s ``admitted_at``, leaving its Merkle nodes (and
    so the root the file's nodes give) as they were."""
    with sqlite3.connect(db) as lite:
        (leaf,) = lite.execute("SELECT leaf FROM log WHERE sequence = ?", (sequence,)).fetchone()
        at = bytes(leaf).index(b'Z"') - 1
        digit = b"1" if bytes(leaf)[at:at + 1] != b"1" else b"2"
        lite.execute("UPDATE log SET leaf = ? WHERE sequence = ?",
                     (bytes(leaf)[:at] + digit + bytes(leaf)[at + 1:], sequence))


def test_migrate_checks_the_copied_leaves_root(tmp_path: Path, founding: Founding,
                                               pg_cluster: Cluster) -> None:
    """``migrate`` recomputes the root from the leaves it copied (``merkle_nodes.log_root``)
    and refuses a copy whose root is not the source log's, before committing it: the target
    keeps what it held, an empty log or, for a ``restore --replace``, the log it held before."""
    genesis, log_key = write_library_files(founding, tmp_path)
    good = tmp_path / "lib.db"
    with serving(genesis, good, log_key) as s:
        admit_authorities(s.url, founding)
    size = len(founding.authority_documents())
    tampered = tmp_path / "tampered.db"
    tampered.write_bytes(good.read_bytes())
    _tamper_leaf(tampered, 2)
    with sqlite3.connect(good) as lite:
        good_root = log_root(lite.execute(LEAVES))
        assert good_root == (size, merkle.root_hash(size, node_reader(lite)))
    with sqlite3.connect(tampered) as lite:  # the file's nodes still give the good root
        assert merkle.root_hash(size, node_reader(lite)) == good_root[1]
        assert log_root(lite.execute(LEAVES))[1] != good_root[1]
    empty = pg_cluster.database()
    with pytest.raises(MigrationFailed) as refused:
        migrate(tampered, empty)
    assert refused.value.code == "MIGRATION_FAILED" and "root" in str(refused.value)
    assert _rows(empty, "SELECT count(*) FROM log") == [(0,)]
    assert _rows(empty, "SELECT count(*) FROM meta") == [(0,)]
    # over a good copy of the same library: refused, the good log stays
    kept = pg_cluster.database()
    assert migrate(good, kept).size == size
    before = _rows(kept, "SELECT sequence, leaf FROM log ORDER BY sequence")
    with pytest.raises(MigrationFailed):
        migrate(tampered, kept, replace=True)
    assert _rows(kept, "SELECT sequence, leaf FROM log ORDER BY sequence") == before
    bad = cli("restore", str(tampered), "--db", kept, "--replace", expect=1)
    assert "MIGRATION_FAILED" in bad.stderr, bad.stderr
    assert _rows(kept, "SELECT sequence, leaf FROM log ORDER BY sequence") == before
    assert cli("export", "--db", kept).stdout == cli("export", "--db", str(good)).stdout


async def test_a_database_outage_is_503_and_the_node_recovers(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    """Reads and writes while the server is down are typed 503s; once it is back the same node
    reads and admits again (the pool and the writer reconnect by themselves).  The outage
    outlasts several of the pool's reconnection delays (1 s, 2 s, 4 s, 8 s…): the first read
    after it is still answered, not refused until the next of them."""
    with cluster() as own:
        async for api in serve_library(tmp_path, founding, clock, db=own.database()):
            first = await api.publish("owner", document("Before", "the outage"))
            await asyncio.to_thread(own.stop, "fast")
            down = time.monotonic()
            r = await api.post(api.envelope("owner", document("During", "the outage")))
            assert r.status_code == 503, r.text
            while time.monotonic() - down < 16:
                r = await api.client.get(f"/api/entries/{first['id']}")
                assert r.status_code == 503 and r.json()["code"] == "STORAGE_UNAVAILABLE", r.text
            await asyncio.to_thread(own.resume)
            assert (await api.client.get(f"/api/entries/{first['id']}")).status_code == 200
            for _ in range(2):  # the first write may still meet the old connection
                r = await api.post(api.envelope("owner", document("After", "the outage")))
                if r.status_code != 503:
                    break
            assert r.status_code == 201, r.text


def test_backup_and_restore_refusals(tmp_path: Path, founding: Founding,
                                     pg_cluster: Cluster) -> None:
    """A PostgreSQL library's backup is a SQLite library file of the same log; a restore
    never replaces another library's database, nor any without ``--replace``; migrating into
    a database a node already opened (its genesis recorded, no log) works, and restoring over
    it takes ``--replace`` as over any existing database."""
    genesis, log_key = write_library_files(founding, tmp_path)
    url = pg_cluster.database()
    with serving(genesis, url, log_key) as s:
        admit_authorities(s.url, founding)
        size = len(founding.authority_documents())
        backup_file = tmp_path / "backup.db"
        out = cli_json("backup", "--db", url, str(backup_file))
        assert out["size"] == size and out["genesis_pin"] == founding.genesis.pin
        with sqlite3.connect(backup_file) as lite:
            assert lite.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert lite.execute("SELECT count(*) FROM log").fetchone()[0] == size
        again = cli("backup", "--db", url, str(backup_file), expect=1)
        assert "BACKUP_EXISTS" in again.stderr
    refused = cli("restore", str(backup_file), "--db", url, expect=1)
    assert "DATABASE_EXISTS" in refused.stderr and "--replace" in refused.stderr
    # another library (its own genesis) on another database
    other = found_library(seed=b"another library", created_at="2026-01-01T00:00:00.000Z")
    other_genesis, other_key = write_library_files(other, tmp_path / "other")
    other_url = pg_cluster.database()
    with serving(other_genesis, other_url, other_key) as s:
        admit_authorities(s.url, other)
    mismatch = cli("restore", str(backup_file), "--db", other_url, "--replace", expect=1)
    assert "GENESIS_MISMATCH" in mismatch.stderr
    # a node opened this database first: the genesis is recorded, the log empty
    opened = pg_cluster.database()
    with serving(genesis, opened, log_key):
        pass
    assert cli_json("migrate", "--db", str(backup_file), "--to", opened)["size"] == size
    assert cli("export", "--db", opened).stdout == cli("export", "--db", str(backup_file)).stdout
    assert "DATABASE_EXISTS" in cli("restore", str(backup_file), "--db", opened,
                                    expect=1).stderr
    assert cli_json("restore", str(backup_file), "--db", opened, "--replace")["size"] == size


def test_a_node_reads_from_a_streaming_replica(tmp_path: Path, founding: Founding) -> None:
    """``serve --read-db``: reads from a real hot standby (``pg_basebackup -R``), and where it
    lags (replay paused here) this node's own writes and cursors beyond the replica are read
    from the primary; what only another node wrote shows once the replica has replayed it."""
    genesis, log_key = write_library_files(founding, tmp_path)
    owner = founding.participants["owner"]
    base = now_ms() - 60_000

    def post(node: str, content: dict[str, Any], at: int) -> str:
        r = httpx.post(f"{node}/api/entries", content=json.dumps(
            owner.envelope(founding.genesis, content, format_ms(base + at))).encode())
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    with cluster() as primary:
        url = primary.database()
        name = urlsplit(url).path.lstrip("/")
        with standby(primary) as replica:
            read_url = replica.url(name)
            # node b signs no checkpoints: a checkpoint it wrote after node a's claim would
            # move its read-your-writes floor past the paused replica, and its reads to the
            # primary (a race seen under load), where this test asks what the replica shows
            with serving(genesis, url, log_key) as a, \
                    serving(genesis, url, None, extra=("--read-db", read_url)) as b:
                admit_authorities(a.url, founding)
                space = {"kind": "space", "title": "Replicated", "links": [], "previous": "",
                         "body": {"summary": "Read from a standby"}}
                root = post(a.url, space, 0)
                deadline = time.time() + 30
                while httpx.get(f"{b.url}/api/entries/{root}").status_code != 200:
                    assert time.time() < deadline, "the standby never replayed the space"
                    time.sleep(0.1)
                with psycopg.connect(read_url, autocommit=True) as standby_conn:
                    # the standby itself replayed everything written so far — node b's own
                    # writes when it opened included — before it pauses: b's 200 above may
                    # have come from the primary while the standby was behind b's floor, and
                    # then every read of b would (rightly) go on to the primary (a race seen
                    # in CI under load)
                    with psycopg.connect(url, autocommit=True) as primary_conn:
                        written = primary_conn.execute(
                            "SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
                    deadline = time.time() + 30
                    while not standby_conn.execute(
                            "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                            (written,)).fetchone()[0]:
                        assert time.time() < deadline, "the standby never caught up"
                        time.sleep(0.05)
                    standby_conn.execute("SELECT pg_wal_replay_pause()")
                    # a pause is only requested: replay stops at its next record
                    deadline = time.time() + 30
                    while standby_conn.execute(
                            "SELECT pg_get_wal_replay_pause_state()").fetchone() != ("paused",):
                        assert time.time() < deadline, "the standby never paused"
                        time.sleep(0.05)
                    in_space = {"links": [{"relation": "contained_in", "target": root}]}
                    elsewhere = post(a.url, claim_revision(1) | in_space, 1)
                    # node b reads the paused replica: node a's new claim is not there yet
                    assert httpx.get(f"{b.url}/api/entries/{elsewhere}").status_code == 404
                    # a cursor node a issued over the longer log: answered, not a 409
                    cursor = httpx.get(f"{a.url}/api/changes",
                                       params={"root": root}).json()["cursor"]
                    r = httpx.get(f"{b.url}/api/changes", params={"root": root,
                                                                  "cursor": cursor})
                    assert r.status_code == 200 and r.json()["items"] == [], r.text
                    # node b's own write is read back at once, from the primary
                    mine = post(b.url, claim_revision(2) | in_space, 2)
                    assert httpx.get(f"{b.url}/api/entries/{mine}").status_code == 200
                    r = httpx.get(f"{b.url}/api/changes", params={"root": root,
                                                                  "cursor": cursor})
                    assert [item["id"] for item in r.json()["items"]] == [mine]
                    standby_conn.execute("SELECT pg_wal_replay_resume()")
                deadline = time.time() + 30
                while httpx.get(f"{b.url}/api/entries/{elsewhere}").status_code != 200:
                    assert time.time() < deadline, "the standby never caught up"
                    time.sleep(0.1)
    bad = cli("serve", "--genesis", str(genesis), "--db", str(tmp_path / "x.db"), "--read-db",
              "postgresql:///x", "--port", "17199", expect=None)
    assert bad.returncode != 0 and "USAGE" in bad.stderr, bad.stderr
    many = cli("serve", "--genesis", str(genesis), "--db", "postgresql:///x", "--read-db",
               "postgresql:///y", "--workers", "2", "--port", "17199", expect=None)
    assert many.returncode != 0 and "--workers 1" in many.stderr, many.stderr
