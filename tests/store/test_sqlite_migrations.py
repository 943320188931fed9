"""SQLite's schema versions (``store/migrations.py``, on ``PRAGMA user_version``): a new
library records the latest; one a version behind is brought to it when opened, in one
transaction (a failing step leaves it whole at its version); one of a newer version, or of a
layout from before versions were recorded, is refused — by the storage, ``alexandria serve``,
``alexandria migrate`` and ``restore`` — with a typed error that changes nothing, and the way
out the refusal names (export, then catch-up into a new library) keeps the whole log; a file of
the baseline layout that records no version is adopted.  SQLite files only: PostgreSQL's
versions are tested in tests/store/test_postgresql.py."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from alexandria.api.status import status_of
from alexandria.errors import Failed
from alexandria.service.bootstrap import Founding
from alexandria.store import feed, migrations, schema
from alexandria.store.backup import restore
from alexandria.store.migrations import MIGRATIONS, VERSION, SchemaTooNew, SchemaTooOld
from alexandria.store.postgresql import schema as pg_schema
from alexandria.store.postgresql.migrate import migrate
from alexandria.store.sqlite import sqlite_storage
from tests.store.test_storage import _reads
from tests.support.catalogue import vote
from tests.support.library import Clock, serve_library
from tests.support.liveserver import serving, write_library_files
from tests.support.objects import publish_example
from tests.support.ops import cli

# Votes without their heads' ids and their targets' roots, and no table of scores: the scores
# page read each vote's head id from its revision and its target's root from the object row.
_BEFORE_VOTE_PAGE = """
DROP TABLE object_scores;
DROP INDEX vote_values_page;
ALTER TABLE vote_values DROP COLUMN head;
ALTER TABLE vote_values DROP COLUMN target_root;
CREATE INDEX vote_values_by_target_seq ON vote_values(author_id, head_sequence, target_seq, value);
"""
# The first index layout: every link in two indexes by its target, the scores page read
# through a narrow index of vote roots, votes naming their targets by root only (applied after
# ``_ROOT_KEYED``, whose indexes it replaces).
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
# Links, ``feed`` and ``deep`` keyed by 64-hex roots and revision ids.
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

# The objects indexed by root (``UNIQUE``), beside the index of revision ids that finds them
# now (``schema.object_row``).
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

_LEVELS_WITH_POSITIONS = (
    "DROP TABLE catalogue_level_terms; DROP TABLE catalogue_levels;"
    + schema.CATALOGUE_LEVELS.replace(", detail=none", "")
)

#: earlier layouts, each as statements that turn a library of the baseline into it
EARLIER = {
    "votes-without-heads": _BEFORE_VOTE_PAGE,
    "links-keyed-by-roots": _ROOT_KEYED,
    "objects-indexed-by-root": _ROOT_INDEXED,
    "revisions-indexed-by-whole-ids": _ID_INDEXED,
    "levels-with-positions": _LEVELS_WITH_POSITIONS,
    "a-retired-index": "CREATE INDEX links_target ON links(target, relation);",
    "leaves-without-record-pieces": "".join(
        f"ALTER TABLE log DROP COLUMN {c};" for c in ("id", "root", "record_length",
                                                       "authority_seq")),
    "the-first-index-layout": (_BEFORE_VOTE_PAGE + _ROOT_KEYED + _EARLIER_INDEXES
                               + _ROOT_INDEXED + _ID_INDEXED),
}

#: a next layout, for the steps' machinery: a column filled from rows already there (a ``;``
#: inside a literal and in a comment), and an index on it
NEXT_STEP = """
-- the next layout; a comment's ; cuts nothing
ALTER TABLE objects ADD COLUMN label TEXT NOT NULL DEFAULT '';
UPDATE objects SET label = kind || ';' || depth;
CREATE INDEX objects_label ON objects(label);
"""


async def _library(tmp_path: Path, founding: Founding, clock: Clock) -> tuple[Path, list[str]]:
    """A library with every kind of row (the contract's example, votes, a revision, a signed
    checkpoint), closed; its path and revisions."""
    async for api in serve_library(tmp_path, founding, clock):
        names = await publish_example(api)
        first = await api.publish("peer", vote(names["claim"], "1"))
        changed = await api.publish("peer", vote(names["claim"], "-1", previous=first["id"]))
        assert (await api.client.get("/api/log/checkpoint")).status_code == 200
        revisions = [*names.values(), first["id"], changed["id"]]
    return tmp_path / "lib.db", revisions


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return migrations.user_version(conn)
    finally:
        conn.close()


def _script(path: Path, script: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript(script)
    finally:
        conn.close()


def _state(path: Path) -> list[object]:
    """Everything a refusal must leave as it was: the statements, ``meta``, the version, the
    log."""
    conn = sqlite3.connect(path)
    try:
        return [*conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name"),
                *conn.execute("SELECT key, value FROM meta ORDER BY key"),
                migrations.user_version(conn),
                *conn.execute("SELECT sequence, leaf FROM log ORDER BY sequence")]
    finally:
        conn.close()


async def _opened(path: Path, founding: Founding) -> None:
    storage = sqlite_storage(path, founding.genesis)
    try:
        await storage.open()
    finally:
        await storage.close()


def _layout(path: Path | str) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return migrations.layout(conn)
    finally:
        conn.close()


def _fresh_layout() -> dict[str, str]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        assert migrations.apply(conn, ":memory:") == [v for v, _sql in MIGRATIONS]
        return migrations.layout(conn)
    finally:
        conn.close()


# --- versions ------------------------------------------------------------------------------


async def test_a_new_library_records_the_latest_version(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    path, _revisions = await _library(tmp_path, founding, clock)
    assert _version(path) == VERSION == MIGRATIONS[-1][0]
    assert _layout(path) == _fresh_layout()
    assert "objects" in _layout(path) and "catalogue_levels_data" not in _layout(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert migrations.apply(conn, path) == []  # current: nothing to do
    finally:
        conn.close()


@pytest.mark.parametrize("version", range(VERSION))
async def test_each_earlier_version_is_brought_to_the_latest(
    tmp_path: Path, founding: Founding, version: int
) -> None:
    """A file at each earlier version (0: created, no tables yet) is brought to the latest
    when the library opens, its layout then a new library's."""
    path = tmp_path / "lib.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if version:
            migrations.apply(conn, path, MIGRATIONS[:version])
        assert migrations.user_version(conn) == version
    finally:
        conn.close()
    await _opened(path, founding)
    assert _version(path) == VERSION
    assert _layout(path) == _fresh_layout()


async def test_a_library_a_version_behind_is_migrated_when_opened(
    tmp_path: Path, founding: Founding, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a next step appended, a library of today's version is migrated by opening it: the
    step's statements run (a ``;`` in a literal and in a comment cut nothing), the version is
    recorded, and the library reads as before."""
    path, revisions = await _library(tmp_path, founding, clock)
    async for api in serve_library(tmp_path, founding, clock, documents=[]):
        before = await _reads(api, revisions)
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, (VERSION + 1, NEXT_STEP)))
    assert migrations.check_database(path) == VERSION
    async for api in serve_library(tmp_path, founding, clock, documents=[]):
        assert await _reads(api, revisions) == before
    assert _version(path) == VERSION + 1
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM objects WHERE label != kind || ';' || depth"
                            ).fetchone() == (0,)
        assert "objects_label" in migrations.layout(conn)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
    await _opened(path, founding)  # and opens again, with nothing to apply
    assert _version(path) == VERSION + 1


async def test_a_failing_step_leaves_the_library_whole_at_its_version(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    path, _revisions = await _library(tmp_path, founding, clock)
    before = _state(path)
    failing = NEXT_STEP + "INSERT INTO no_such_table VALUES (1);"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
            migrations.apply(conn, path, (*MIGRATIONS, (VERSION + 1, failing)))
        assert not conn.in_transaction
    finally:
        conn.close()
    assert _state(path) == before  # neither the column, nor the index, nor the version
    await _opened(path, founding)


def test_statements_are_cut_where_sqlite_says_they_end() -> None:
    script = "SELECT ';'; -- a ; here\nSELECT 2 /* ; */;\n\n-- only a comment;\n"
    assert list(migrations.statements(script)) == [
        "SELECT ';';", " -- a ; here\nSELECT 2 /* ; */;"]


# --- refusals ------------------------------------------------------------------------------


async def test_a_library_of_a_newer_version_is_refused(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    """What PostgreSQL says of a newer schema (the same class, ``SCHEMA_TOO_NEW``): by the
    storage, ``migrate`` (before it connects anywhere) and ``restore``, the file unchanged."""
    assert pg_schema.SchemaTooNew is SchemaTooNew
    path, _revisions = await _library(tmp_path, founding, clock)
    _script(path, f"PRAGMA user_version = {VERSION + 1}")
    before = _state(path)
    with pytest.raises(SchemaTooNew) as info:
        await _opened(path, founding)
    err = info.value
    assert err.code == "SCHEMA_TOO_NEW" and status_of(err) == 503
    assert err.details == {"current": VERSION + 1, "known": VERSION, "path": str(path)}
    assert "upgrade Alexandria" in err.message
    with pytest.raises(SchemaTooNew):
        migrate(path, "postgresql:///never-reached")
    with pytest.raises(SchemaTooNew):
        restore(path, tmp_path / "restored.db")
    assert not (tmp_path / "restored.db").exists()
    assert _state(path) == before


@pytest.mark.parametrize("earlier", EARLIER.values(), ids=EARLIER.keys())
async def test_a_library_of_an_earlier_layout_is_refused(
    tmp_path: Path, founding: Founding, clock: Clock, earlier: str
) -> None:
    path, _revisions = await _library(tmp_path, founding, clock)
    _script(path, earlier + "PRAGMA user_version = 0;")
    before = _state(path)
    with pytest.raises(SchemaTooOld) as info:
        await _opened(path, founding)
    err = info.value
    assert err.code == "SCHEMA_TOO_OLD" and status_of(err) == 503
    assert f"alexandria export --db {path}" in err.message and "--catch-up" in err.message
    named = err.details["missing"] + err.details["unexpected"] + err.details["changed"]
    assert named and all(name in err.message for name in named)
    with pytest.raises(SchemaTooOld):
        migrate(path, "postgresql:///never-reached")
    with pytest.raises(SchemaTooOld):
        restore(path, tmp_path / "restored.db")
    assert _state(path) == before


async def test_a_file_of_other_tables_is_not_a_library(tmp_path: Path, founding: Founding) -> None:
    path = tmp_path / "other.db"
    _script(path, "CREATE TABLE notes(body TEXT);")
    with pytest.raises(Failed) as info:
        await _opened(path, founding)
    assert info.value.code == "NOT_A_LIBRARY"
    assert _layout(path) == {"notes": "CREATE TABLE notes(body TEXT)"}


@pytest.mark.parametrize("case", ["newer", "earlier"])
async def test_serve_refuses_before_serving(
    tmp_path: Path, founding: Founding, clock: Clock, case: str
) -> None:
    path, _revisions = await _library(tmp_path, founding, clock)
    _script(path, f"PRAGMA user_version = {VERSION + 1}" if case == "newer"
            else _ID_INDEXED + "PRAGMA user_version = 0;")
    genesis, log_key = write_library_files(founding, tmp_path / "files")
    r = subprocess.run(
        [sys.executable, "-m", "alexandria.cli", "serve", "--genesis", str(genesis), "--db",
         str(path), "--log-key", str(log_key), "--port", "1"],
        capture_output=True, timeout=120,
    )
    assert r.returncode == 1, r.stderr
    code = b"SCHEMA_TOO_NEW" if case == "newer" else b"SCHEMA_TOO_OLD"
    assert b"[" + code + b"]" in r.stderr, r.stderr
    assert b"serving" not in r.stdout


async def test_the_way_out_of_an_earlier_layout_keeps_the_whole_log(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    """What the refusal says to do: export the log, create the new library with ``serve``,
    replay the export into it with ``restore --catch-up``: every leaf and checkpoint kept."""
    path, _revisions = await _library(tmp_path, founding, clock)
    _script(path, _ID_INDEXED + _ROOT_KEYED + "PRAGMA user_version = 0;")
    export = tmp_path / "log.jsonl"
    cli("export", "--db", str(path), "-o", str(export))
    genesis, log_key = write_library_files(founding, tmp_path / "files")
    new = tmp_path / "new.db"
    with serving(genesis, new, log_key):
        pass
    cli("restore", "--db", str(new), "--catch-up", str(export))
    log = "SELECT sequence, type, leaf FROM log ORDER BY sequence"
    checkpoints = "SELECT size, root, note FROM checkpoints ORDER BY size"
    old_conn, new_conn = sqlite3.connect(path), sqlite3.connect(new)
    try:
        for sql in (log, checkpoints):
            assert new_conn.execute(sql).fetchall() == old_conn.execute(sql).fetchall()
        assert len(new_conn.execute(log).fetchall()) > 10
        assert migrations.user_version(new_conn) == VERSION
    finally:
        old_conn.close()
        new_conn.close()


# --- adoption ------------------------------------------------------------------------------


async def test_a_library_of_the_baseline_layout_without_a_version_is_adopted(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    """As earlier versions left it: no version recorded, and tables rebuilt under another name
    then renamed (SQLite keeps the new name quoted) or given a column by ``ALTER TABLE`` (SQLite
    appends its text) — the same layout, written otherwise."""
    path, revisions = await _library(tmp_path, founding, clock)
    async for api in serve_library(tmp_path, founding, clock, documents=[]):
        before = await _reads(api, revisions)
    _script(path, (
        schema._REVISIONS.format(name="revisions_rebuilt")
        + "INSERT INTO revisions_rebuilt SELECT * FROM revisions;"
        + "DROP TABLE revisions; ALTER TABLE revisions_rebuilt RENAME TO revisions;"
        + "DROP INDEX vote_values_page; ALTER TABLE vote_values DROP COLUMN target_root;"
        + "ALTER TABLE vote_values ADD COLUMN target_root TEXT NOT NULL DEFAULT '';"
        + "UPDATE vote_values SET target_root = (SELECT root FROM objects"
        + " WHERE created_sequence = vote_values.target_seq);"
        + "DROP INDEX links_related;"  # the baseline's (version 2 changed it)
        + schema.TABLES  # the indexes of both again
        + "PRAGMA user_version = 0;"
    ))
    conn = sqlite3.connect(path)
    try:
        declared = dict(conn.execute("SELECT name, sql FROM sqlite_master"))
    finally:
        conn.close()
    assert declared["revisions"].startswith('CREATE TABLE "revisions"')
    assert declared["vote_values"].endswith("target_root TEXT NOT NULL DEFAULT '')"
                                            " WITHOUT ROWID")
    assert migrations.check_database(path) == 1  # read-only: recorded when opened
    assert _version(path) == 0
    async for api in serve_library(tmp_path, founding, clock, documents=[]):
        assert await _reads(api, revisions) == before
    assert _version(path) == VERSION


async def test_migrate_brings_the_sqlite_file_to_the_latest_version_first(
    tmp_path: Path, founding: Founding, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``alexandria migrate`` applies the steps a SQLite library lacks before it copies it
    (under the lock that keeps a server away), as opening it would; a backup being restored
    into PostgreSQL is never changed: it is refused instead."""
    path, _revisions = await _library(tmp_path, founding, clock)
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, (VERSION + 1, NEXT_STEP)))
    before = _state(path)
    with pytest.raises(SchemaTooOld) as info:
        migrate(path, "postgresql://127.0.0.1:1/none", replace=True, server_file=False)
    assert info.value.details == {"found": VERSION, "known": VERSION + 1, "path": str(path)}
    assert _state(path) == before
    with pytest.raises(Failed) as failed:  # upgraded, then no PostgreSQL to copy into
        migrate(path, "postgresql://127.0.0.1:1/none")
    assert failed.value.code == "STORAGE_UNAVAILABLE"
    assert _version(path) == VERSION + 1
    assert "objects_label" in _layout(path)
