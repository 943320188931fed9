"""Feed membership whose cost does not grow with conversation depth (``store/feed.py``).

Random libraries of spaces, claims, evidence, discussions (about, contained in, branching from)
and replies, deep chains included, are built with ``feed.NEAR`` lowered to 2, so that most
conversations are deeper than the near rows reach; every root's ``/api/changes`` pages (small
limits and scan bounds, cursors across snapshots), ``section=all``, ``discussion`` (items in
every order and the exact total) and ancestor spaces are compared with a naive transitive
closure computed here.  Both backends.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from alexandria.reads.changes import Limits
from alexandria.service.bootstrap import Founding
from alexandria.store import feed
from tests.support.library import Api, Clock, serve_library
from tests.support.objects import claim, discussion, evidence, ids, reply, revise, space

CONVERSATION = ("discussion", "reply")


@dataclass
class Obj:
    root: str
    kind: str
    content: dict[str, Any]
    parents: list[str]
    revisions: list[str] = field(default_factory=list)
    depth: int = 0  # containment depth of a space


@dataclass
class Model:
    """The library as the test built it: objects in creation order, revisions in admission
    order, and each object's feed parents (the naive closure's input)."""

    objs: dict[str, Obj] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # revision ids in admission order
    owner_of: dict[str, str] = field(default_factory=dict)  # revision id -> root

    def ancestors(self, root: str) -> set[str]:
        out: set[str] = set()
        todo = list(self.objs[root].parents)
        while todo:
            r = todo.pop()
            if r not in out:
                out.add(r)
                todo += self.objs[r].parents
        return out

    def below(self, root: str) -> list[str]:
        """Roots strictly below ``root``, by creation."""
        return [r for r in self.objs if r != root and root in self.ancestors(r)]

    def feed(self, root: str) -> list[str]:
        return [rev for rev in self.order
                if self.owner_of[rev] == root or root in self.ancestors(self.owner_of[rev])]

    def head(self, root: str) -> str:
        return self.objs[root].revisions[-1]


async def _publish(api: Api, model: Model, content: dict[str, Any], parents: list[str],
                   root: str | None = None) -> str:
    signed = await api.publish("owner", content)
    rev = signed["id"]
    if root is None:
        root = signed["root"]
        model.objs[root] = Obj(root, content["kind"], content, parents)
    model.objs[root].revisions.append(rev)
    model.order.append(rev)
    model.owner_of[rev] = root
    return root


async def build(api: Api, data: st.DataObject, model: Model, steps: int) -> None:
    """``steps`` random admissions within the state rules; replies favour the newest
    conversation node, so chains grow deep."""
    of = model.objs

    def pick(kinds: tuple[str, ...], newest: bool = False) -> Obj | None:
        pool = [o for o in of.values() if o.kind in kinds]
        if not pool:
            return None
        if newest and data.draw(st.booleans()):
            return pool[-1]
        return pool[data.draw(st.integers(0, len(pool) - 1))]

    for _ in range(steps):
        op = data.draw(st.sampled_from(
            ("space", "claim", "evidence", "discussion", "reply", "reply", "reply", "revise")))
        if op == "space":
            parent = pick(("space",)) if data.draw(st.booleans()) else None
            if parent is not None and parent.depth >= 3:
                parent = None
            root = await _publish(api, model, space("S", parent.root if parent else ""),
                                  [parent.root] if parent else [])
            of[root].depth = parent.depth + 1 if parent else 0
        elif op == "claim":
            parent = pick(("space",))
            await _publish(api, model, claim("C", parent.root if parent else ""),
                           [parent.root] if parent else [])
        elif op == "evidence":
            target = pick(("claim",))
            if target is not None:
                await _publish(api, model, evidence(target.root, "seen"), [target.root])
        elif op == "discussion":
            parent = pick(("space",)) if data.draw(st.booleans()) else None
            about = pick(("claim", "space")) if data.draw(st.booleans()) else None
            branch = pick(CONVERSATION, newest=True) if data.draw(st.booleans()) else None
            content = discussion("D", parent=parent.root if parent else "",
                                 about=model.head(about.root) if about else "",
                                 branches_from=model.head(branch.root) if branch else "")
            parents = [o.root for o in (parent, about, branch) if o is not None]
            await _publish(api, model, content, parents)
        elif op == "reply":
            target = pick(CONVERSATION, newest=True)
            if target is not None:
                relation = data.draw(st.sampled_from(("replies_to", "answers")))
                await _publish(api, model, reply(model.head(target.root), "r", relation),
                               [target.root])
        else:
            target = pick(("discussion", "reply", "space", "claim"))
            if target is not None:
                await _publish(api, model, revise(target.content, model.head(target.root)),
                               target.parents, root=target.root)


async def _changes(api: Api, root: str, limit: int, cursor: str | None) -> dict[str, Any]:
    params = {"root": root, "limit": str(limit), **({"cursor": cursor} if cursor else {})}
    r = await api.client.get("/api/changes", params=params)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def follow(api: Api, root: str, limit: int, cursor: str | None = None
                 ) -> tuple[list[str], str]:
    """Every item of the root's feed from ``cursor`` until a snapshot is exhausted."""
    got: list[str] = []
    calls = 0
    while True:
        page = await _changes(api, root, limit, cursor)
        got += ids(page["items"])
        cursor = page["cursor"]
        calls += 1
        assert calls < 2_000
        if not page["has_more"]:
            return got, cursor


async def check(api: Api, model: Model, limits: Callable[[], int]) -> None:
    """Every root's feed, tree, ancestor spaces and conversation against the naive closure;
    ``limits()`` gives each root's ``/api/changes`` page size."""
    for root, obj in model.objs.items():
        below = model.below(root)
        heads = [model.head(r) for r in below]
        # /api/changes: small limits, across a new snapshot
        limit = limits()
        expected = model.feed(root)
        got, cursor = await follow(api, root, limit)
        assert got == expected, (root, obj.kind)
        assert (await _changes(api, root, limit, cursor))["items"] == []
        # section=all: the whole tree below, by creation, current heads
        view = (await api.client.get(f"/api/objects/{root}", params={"section": "all"})).json()
        assert ids(view["items"]) == heads[:50]
        assert view["next_offset"] == (50 if len(heads) > 50 else None)
        # ancestor spaces, outermost first
        spaces = sorted((model.objs[a].depth, list(model.objs).index(a), a)
                        for a in model.ancestors(root) if model.objs[a].kind == "space")
        assert ids(view["ancestors"]) == [model.head(a) for _d, _i, a in spaces]
        if obj.kind not in CONVERSATION:
            continue
        # discussion: items in each order and the exact total
        creation = {r: i for i, r in enumerate(model.order)}
        for sort, order in (("old", heads), ("new", heads[::-1]),
                            ("top", sorted(heads, key=lambda h: -creation[h]))):
            d = (await api.client.get(f"/api/entries/{root}/discussion",
                                      params={"sort": sort})).json()
            assert d["total"] == len(below)
            assert ids(d["items"]) == order[:50], sort


# each example is a whole library built over HTTP: no shrinking (a failure prints its draws)
@settings(max_examples=12, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
async def test_every_feed_matches_the_naive_closure(
    api: Api, monkeypatch: pytest.MonkeyPatch, data: st.DataObject
) -> None:
    monkeypatch.setattr(feed, "NEAR", data.draw(st.integers(1, 3)))
    api.library.limits = Limits(scan=data.draw(st.sampled_from((2, 5, 10_000))))
    model = Model()
    await build(api, data, model, data.draw(st.integers(5, 30)))
    await check(api, model, lambda: data.draw(st.integers(1, 4)))
    # a snapshot followed half-way, then more admissions deep below: nothing skipped or repeated
    roots = list(model.objs)
    assume(roots)  # replies, revisions and evidence alone, with nothing to attach to, made none
    root = roots[data.draw(st.integers(0, len(roots) - 1))]
    page = await _changes(api, root, 1, None)
    got, cursor = ids(page["items"]), page["cursor"]
    await build(api, data, model, data.draw(st.integers(1, 8)))
    if page["has_more"]:  # the rest of the first snapshot
        more, cursor = await follow(api, root, 2, cursor)
        got += more
    rest, _ = await follow(api, root, 3, cursor)  # the next snapshot
    assert got + rest == model.feed(root)
    await check(api, model, lambda: data.draw(st.integers(1, 4)))


async def scripted(api: Api, model: Model, chain: int) -> dict[str, str]:
    """A library with every way into a conversation: nested spaces, a claim, a discussion about
    the claim in the outer space with a chain of ``chain`` replies, a discussion branching from
    the chain about the inner space, another branching from that one's replies, revisions."""
    async def add(content: dict[str, Any], parents: list[str]) -> str:
        return await _publish(api, model, content, parents)

    head = model.head
    n: dict[str, str] = {}
    n["s0"] = await add(space("Outer"), [])
    n["s1"] = await add(space("Inner", n["s0"]), [n["s0"]])
    n["c"] = await add(claim("Claim", n["s1"]), [n["s1"]])
    n["e"] = await add(evidence(n["c"], "seen"), [n["c"]])
    n["d1"] = await add(discussion("D1", parent=n["s0"], about=n["c"]), [n["s0"], n["c"]])
    at = n["d1"]
    for i in range(chain):
        at = await add(reply(head(at), f"r{i}", ("replies_to", "answers")[i % 2]), [at])
        n[f"r{i}"] = at
    n["d2"] = await add(discussion("D2", parent=n["s1"], about=n["s1"],
                                   branches_from=head(n["r3"])), [n["s1"], n["s1"], n["r3"]])
    at = n["d2"]
    for i in range(6):
        at = await add(reply(head(at), f"q{i}"), [at])
        n[f"q{i}"] = at
    n["d3"] = await add(discussion("D3", branches_from=head(at)), [at])
    for i in range(3):
        n[f"t{i}"] = await add(reply(head(n["d3"]), f"t{i}"), [n["d3"]])
    for name in ("r2", "d1", "q4", "s1"):
        obj = model.objs[n[name]]
        await _publish(api, model, revise(obj.content, head(obj.root)), obj.parents, obj.root)
    return n


async def test_a_deep_scripted_library_reads_as_the_closure(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed, "NEAR", 2)
    api.library.limits = Limits(scan=4)
    model = Model()
    n = await scripted(api, model, 12)
    sizes = itertools.cycle((1, 2, 3, 50))
    await check(api, model, lambda: next(sizes))

    def counts(conn: Any) -> tuple[int, int, int]:
        deep = int(conn.execute("SELECT count(*) FROM deep").fetchone()[0])
        seq = int(conn.execute("SELECT created_sequence FROM objects WHERE root = ?",
                               (n["r11"],)).fetchone()[0])
        rows = int(conn.execute(f"SELECT count(*) FROM {feed.ROWS} AS f WHERE sequence = ?",
                                (seq,)).fetchone()[0])
        hangs = int(conn.execute("SELECT count(*) FROM deep WHERE owner = (SELECT sequence"
                                 " FROM revisions WHERE id = ?)", (n["c"],)).fetchone()[0])
        return deep, rows, hangs

    deep, rows, hangs = await api.library.storage.read(counts)
    assert deep > 0 and hangs == 1  # the claim's feed misses the chain's far end
    assert rows == 2  # the deepest reply writes rows for its two nearest conversation ancestors


async def test_rows_per_admission_do_not_grow_with_depth(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed, "NEAR", 3)
    model = Model()
    n = await scripted(api, model, 40)

    def written(conn: Any, root: str) -> tuple[int, int, int]:
        seq = int(conn.execute("SELECT created_sequence FROM objects WHERE root = ?",
                               (root,)).fetchone()[0])
        return (
            int(conn.execute(f"SELECT count(*) FROM {feed.ROWS} AS f WHERE sequence = ?",
                             (seq,)).fetchone()[0]),
            int(conn.execute("SELECT count(*) FROM deep WHERE hang = ?", (seq,)).fetchone()[0]),
            len(conn.execute("SELECT ancestors FROM objects WHERE root = ?",
                             (root,)).fetchone()[0]),
        )

    at_10 = await api.library.storage.read(lambda c: written(c, n["r9"]))
    at_39 = await api.library.storage.read(lambda c: written(c, n["r39"]))
    assert at_10[0] == at_39[0] == 3
    assert at_10[2] == at_39[2]  # three tokens "seq/d"
    assert model.feed(n["d1"]) == (await follow(api, n["d1"], 7))[0]


def _downgrade(db: str | Path) -> int:
    """Turn a library written with every ancestor near into the first feed layout: plain lists
    of ancestor roots, no layout recorded, leaves without their records' pieces; on PostgreSQL
    also the first schema (``feed`` rows keyed by root, links naming their targets' roots, not
    their integer keys, none of the later columns, tables and index: schema version 1; a SQLite
    file of an earlier schema is refused, tests/store/test_sqlite_migrations.py); its ``feed``
    rows."""
    drops = [
        "ALTER TABLE links ADD COLUMN target_root TEXT NOT NULL DEFAULT ''",
        "UPDATE links SET target_root ="
        " (SELECT root FROM objects WHERE created_sequence = links.target_owner)",
        "DROP TABLE tree_heads", "DROP INDEX links_related", "DROP INDEX links_to_revision",
        "DROP INDEX links_relationships", "ALTER TABLE links DROP COLUMN target_seq",
        "ALTER TABLE links DROP COLUMN target_owner",
        "CREATE TABLE feed_by_root AS SELECT o.root AS root, f.sequence AS sequence"
        f" FROM {feed.ROWS} f JOIN objects o ON o.created_sequence = f.owner",
        "DROP TABLE feed", "DROP TABLE feed_recent", "ALTER TABLE feed_by_root RENAME TO feed",
        "DROP INDEX revisions_tree", "DROP INDEX deep_tree", "DROP TABLE deep",
        "ALTER TABLE revisions DROP COLUMN tree", "ALTER TABLE objects DROP COLUMN tree",
        "ALTER TABLE objects DROP COLUMN cdepth", "ALTER TABLE objects DROP COLUMN cparent",
        "ALTER TABLE objects DROP COLUMN jump", "DELETE FROM meta WHERE key = 'feed_layout'",
        *(f"ALTER TABLE log DROP COLUMN {c}" for c in ("id", "root", "record_length",
                                                         "authority_seq")),
        # the full-text index back to version 1's postings, a word's level as its body count
        # (version 13 makes the same levels of them again)
        "CREATE TABLE catalogue_postings(term TEXT COLLATE \"C\" NOT NULL, seq BIGINT NOT NULL,"
        " title_count INTEGER NOT NULL, body_count INTEGER NOT NULL, PRIMARY KEY(term, seq))",
        "CREATE INDEX catalogue_postings_seq ON catalogue_postings(seq)",
        "INSERT INTO catalogue_postings SELECT split_part(t, '·', 1), seq, 0,"
        " split_part(t, '·', 2)::int FROM (SELECT seq, t FROM catalogue_levels,"
        " unnest(string_to_array(tokens, ' ')) AS t WHERE split_part(t, '·', 2)::int < 64"
        " UNION ALL SELECT seq, t FROM catalogue_levels, unnest(string_to_array(over, ' ')) AS t"
        ") AS l",
        "DROP TABLE catalogue_levels",
    ]
    conn: Any
    if isinstance(db, Path):
        conn = sqlite3.connect(db)
        mark = "?"
        drops = ["DELETE FROM meta WHERE key = 'feed_layout'",
                 "UPDATE log SET id = NULL, root = NULL, record_length = NULL,"
                 " authority_seq = NULL"]
    else:
        conn = psycopg.connect(db, autocommit=True)
        mark = "%s"
        drops.append("DELETE FROM schema_migrations WHERE version >= 2")
    try:
        roots = dict(conn.execute("SELECT created_sequence, root FROM objects").fetchall())
        for root, text in conn.execute("SELECT root, ancestors FROM objects").fetchall():
            conn.execute(f"UPDATE objects SET ancestors = {mark} WHERE root = {mark}",
                         (" ".join(roots[s] for s in feed.Near.decode(text).seqs), root))
        for sql in drops:
            conn.execute(sql)
        if isinstance(conn, sqlite3.Connection):
            conn.commit()
        rows = f"{feed.ROWS} AS f" if isinstance(db, Path) else "feed"  # SQLite stages some
        return int(conn.execute(f"SELECT count(*) FROM {rows}").fetchone()[0])
    finally:
        conn.close()


async def test_a_library_of_the_earlier_layout_is_rebuilt_when_opened(
    tmp_path: Path, founding: Founding, clock: Clock, db: str | Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library written before this layout (a ``feed`` row per ancestor, plain ancestor
    lists; on PostgreSQL none of the new columns and tables) gets them when opened, its feed
    tables are rebuilt from ``objects`` and its links, and it reads and admits as a new one
    does (its leaves' records read with their revisions' pieces, the new leaves' with their
    own)."""
    monkeypatch.setattr(feed, "NEAR", 10**6)  # every ancestor near: the earlier layout's rows
    model = Model()
    async for api in serve_library(tmp_path, founding, clock, db=db):
        n = await scripted(api, model, 12)
    every_ancestor = _downgrade(db)

    monkeypatch.setattr(feed, "NEAR", 2)
    sizes = itertools.cycle((1, 3, 50))
    async for api in serve_library(tmp_path, founding, clock, documents=[], db=db):
        await check(api, model, lambda: next(sizes))
        at = n["t2"]
        for i in range(4):  # and it goes on admitting, deeper
            at = await _publish(api, model, reply(model.head(at), f"after {i}"), [at])
        await check(api, model, lambda: next(sizes))
        rows = await api.library.storage.read(lambda conn: [
            conn.execute(sql).fetchone()[0] for sql in (
                "SELECT value FROM meta WHERE key = 'feed_layout'",
                f"SELECT count(*) FROM {feed.ROWS} AS f", "SELECT count(*) FROM deep",
                # the leaves admitted since carry their records' pieces; those before are read
                # with their revisions' (check() read both)
                "SELECT count(*) FROM log l JOIN revisions r ON r.sequence = l.sequence"
                " WHERE l.id = r.id AND l.root = r.root AND l.record_length = r.record_length"
                " AND l.authority_seq = r.authority_seq",
                "SELECT count(*) FROM log WHERE id IS NULL AND type = 'contribution'")])
    assert rows[0] == feed.layout()
    assert rows[1] < every_ancestor and rows[2] > 0
    assert rows[3] == 4 and rows[4] > 0


async def test_later_pages_of_a_deep_root(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """``section=all`` and the discussion route page by offset: the pages after the first of a
    deep root hold the rest of the closure, in each order."""
    monkeypatch.setattr(feed, "NEAR", 2)
    model = Model()
    n = await scripted(api, model, 70)
    for name in ("s0", "c", "d1", "r5"):
        root = n[name]
        heads = [model.head(r) for r in model.below(root)]
        assert len(heads) > 50
        got: list[str] = []
        offset: int | None = 0
        while offset is not None:
            view = (await api.client.get(f"/api/objects/{root}",
                                         params={"section": "all", "offset": offset})).json()
            got += ids(view["items"])
            offset = view["next_offset"]
        assert got == heads, name
        if name in ("d1", "r5"):
            for sort, order in (("old", heads), ("new", heads[::-1])):
                got, offset = [], 0
                while offset is not None:
                    d = (await api.client.get(f"/api/entries/{root}/discussion",
                                              params={"sort": sort, "offset": offset})).json()
                    assert d["total"] == len(heads)
                    got += ids(d["items"])
                    offset = d["next_offset"]
                assert got == order, (name, sort)
