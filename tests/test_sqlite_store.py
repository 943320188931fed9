"""Storage behaviour that the HTTP tests do not pin down."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson

from alexandria.core.timestamps import parse_ms
from alexandria.reads.objects import SECTIONS
from alexandria.service.bootstrap import Founding
from alexandria.store.merkle_nodes import tree_size
from tests import objects_support
from tests.conftest import Api, Clock, serve_library
from tests.objects_support import publish_example


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


def _downgrade(path: Path) -> None:
    """Rewrite a database into the previous layout: tree ancestors in a ``closure`` table, a
    ``feed`` row for each object's own revisions, every revision indexed by root, ``objects``
    keyed by root, Merkle nodes keyed by ``(level, idx)``."""
    conn = sqlite3.connect(path, isolation_level=None)
    rows = conn.execute("SELECT root, ancestors FROM objects").fetchall()
    nodes = []
    for position, h in conn.execute("SELECT position, hash FROM merkle_nodes"):
        level = (~position & (position + 1)).bit_length() - 1  # trailing 1-bits
        nodes.append((level, position >> (level + 1), h))
    columns = (
        "root, kind, author, head, head_sequence, revisions, depth, parent, vote_target,"
        " feed_links, created_sequence"
    )
    conn.executescript(
        "BEGIN;"
        "CREATE TABLE closure(member TEXT NOT NULL, ancestor TEXT NOT NULL,"
        " PRIMARY KEY(member, ancestor)) WITHOUT ROWID;"
        "INSERT INTO feed(root, sequence) SELECT root, sequence FROM revisions;"
        "DROP INDEX revisions_later;"
        "CREATE INDEX revisions_root ON revisions(root, sequence);"
        "CREATE TABLE objects_old(root TEXT PRIMARY KEY, kind TEXT NOT NULL,"
        " author TEXT NOT NULL, head TEXT NOT NULL, head_sequence INTEGER NOT NULL,"
        " revisions INTEGER NOT NULL, depth INTEGER NOT NULL, parent TEXT NOT NULL,"
        " vote_target TEXT NOT NULL, feed_links TEXT NOT NULL,"
        " created_sequence INTEGER NOT NULL) WITHOUT ROWID;"
        f"INSERT INTO objects_old({columns}) SELECT {columns} FROM objects;"
        "DROP TABLE objects;"
        "ALTER TABLE objects_old RENAME TO objects;"
        "CREATE INDEX objects_head_sequence ON objects(head_sequence);"
        "CREATE INDEX objects_contents ON objects(parent, kind, created_sequence)"
        " WHERE parent != '';"
        "DROP TABLE merkle_nodes;"
        "CREATE TABLE merkle(level INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL,"
        " PRIMARY KEY(level, idx)) WITHOUT ROWID;"
    )
    conn.executemany("INSERT INTO merkle(level, idx, hash) VALUES (?, ?, ?)", nodes)
    conn.executemany(
        "INSERT INTO closure(member, ancestor) VALUES (?, ?)",
        [(root, a) for root, ancestors in rows for a in ancestors.split()],
    )
    conn.execute("COMMIT")
    conn.close()


async def test_a_database_of_the_previous_layout_is_migrated_and_reads_the_same(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    async for api in serve_library(tmp_path, founding, clock):
        names = await publish_example(api)
        first = await api.publish("owner", _claim("Revised later"))
        revised = await api.publish("owner", {**_claim("Revised"), "previous": first["id"]})
        revisions = [*names.values(), first["id"], revised["id"]]
        before = await _reads(api, revisions)
    _downgrade(tmp_path / "lib.db")

    async for api in serve_library(tmp_path, founding, clock, documents=[]):
        assert await _reads(api, revisions) == before
        conn = sqlite3.connect(tmp_path / "lib.db")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "closure" not in tables and "revisions_root" not in tables
        assert "merkle" not in tables and "merkle_nodes" in tables
        assert "revisions_later" in tables and "objects_contents" in tables
        assert "objects_head_sequence" in tables
        keyed = conn.execute("SELECT name FROM pragma_table_info('objects') WHERE pk = 1")
        assert keyed.fetchall() == [("created_sequence",)]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        own = conn.execute(
            "SELECT count(*) FROM feed f JOIN revisions r ON r.sequence = f.sequence"
            " WHERE r.root = f.root"
        ).fetchone()[0]
        assert own == 0
        conn.close()
        # and the migrated database goes on admitting: a reply deep in the example's thread
        reply = await api.publish("peer", objects_support.reply(names["reply"], "Afterwards"))
        feed = (await api.client.get("/api/changes", params={"root": reply["root"]})).json()
        assert [item["id"] for item in feed["items"]] == [reply["id"]]
        feed = (await api.client.get("/api/changes", params={"root": names["space"]})).json()
        assert feed["items"][-1]["id"] == reply["id"]
