"""Finding things by the ids pages print: ``GET /api/lookup``, pages addressed by a prefix, the
catalogue's search box and the log's pages, through the real app on both backends."""

from __future__ import annotations

import re
from typing import Any

import pytest

from alexandria.reads import lookup
from alexandria.reads.pages import LOG_PAGE_ENTRIES
from tests.support.library import Api
from tests.support.objects import claim, publish_example, revise

#: fake actors sharing a prefix no hash-derived id has in these tests, to make a prefix
#: ambiguous (``catalogue_actors`` is a derived table: only lookups read these rows)
SHARED = "00000000"


async def _fake_actors(api: Api, n: int, start: int = 0) -> list[str]:
    actors = [SHARED + f"{i:056x}" for i in range(start, start + n)]

    def insert(conn: Any) -> None:
        for a in actors:
            conn.execute("INSERT INTO catalogue_actors(actor) VALUES (?)", (a,))

    await api.library.storage.write(insert)
    return actors


async def _lookup(api: Api, **params: str) -> Any:
    return await api.client.get("/api/lookup", params=params)


async def test_full_ids_and_prefixes_name_objects_revisions_actors_and_keys(api: Api) -> None:
    names = await publish_example(api)
    root = next(iter(names.values()))
    first = await api.publish("owner", claim("Water boils at 100 C"))
    second = await api.publish("owner", revise(claim("Water boils at 100 C"), first["id"],
                                               title="Water boils at 100 C at sea level"))
    for given in (first["id"], first["id"][:12], first["id"][:8]):
        r = await _lookup(api, id=given)
        assert r.status_code == 200, r.text
        assert r.json() == {"kind": "object", "id": first["id"], "root": first["id"],
                            "url": f"/objects/{first['id']}",
                            "entry": first["admission"]["sequence"],
                            "title": "Water boils at 100 C"}
    r = await _lookup(api, id=second["id"][:10])
    assert r.json()["kind"] == "revision"
    assert r.json()["url"] == f"/revisions/{second['id']}"
    assert r.json()["root"] == first["id"]
    author = second["record"]["author"]
    r = await _lookup(api, id=author[:12])
    assert r.json() == {"kind": "actor", "id": author, "url": f"/authors/{author}"}
    key = api.founding.authority_documents()[0]
    cert_key = next(v for k, v in key.items() if k != "signatures")["key"]
    r = await _lookup(api, id=cert_key[:12], kind="key")
    assert r.status_code == 200, r.text
    assert r.json()["kind"] == "key" and r.json()["id"] == cert_key
    assert r.json()["url"].startswith("/log?entry=")
    # kinds narrow the search
    assert (await _lookup(api, id=root[:12], kind="actor")).status_code == 404


async def test_lookup_refuses_bad_input_and_reports_unknown_and_ambiguous(api: Api) -> None:
    for bad in ("abc", "0123456", "ABCDEF0123", "0123456z", "0" * 65, " 01234567"):
        r = await _lookup(api, id=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["code"] == "BAD_ID"
    assert (await api.client.get("/api/lookup")).json()["code"] == "MISSING_PARAMETER"
    assert (await _lookup(api, id="01234567", kind="thing")).status_code == 400
    r = await _lookup(api, id="fedcba9876543210")
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_ID"
    actors = await _fake_actors(api, 3)
    r = await _lookup(api, id=SHARED)
    assert r.status_code == 409 and r.json()["code"] == "AMBIGUOUS_ID"
    details = r.json()["details"]
    assert [c["id"] for c in details["candidates"]] == actors
    assert details["truncated"] is False
    assert (await _lookup(api, id=actors[1])).json()["id"] == actors[1]  # the full id: one
    more = await _fake_actors(api, lookup.MAX_CANDIDATES + 5, start=3)
    r = await _lookup(api, id=SHARED)
    details = r.json()["details"]
    assert len(details["candidates"]) == lookup.MAX_CANDIDATES and details["truncated"]
    assert details["candidates"][0]["id"] == min(actors + more)


async def test_pages_take_a_unique_prefix_and_the_search_box_goes_to_it(api: Api) -> None:
    first = await api.publish("owner", claim("Lookups find things"))
    rev = first["id"]
    r = await api.client.get(f"/objects/{rev[:12]}?section=history")
    assert r.status_code == 302 and r.headers["location"] == f"/objects/{rev}?section=history"
    r = await api.client.get(f"/revisions/{rev[:9]}")
    assert r.status_code == 302 and r.headers["location"] == f"/revisions/{rev}"
    assert (await api.client.get("/revisions/fedcba9876543")).status_code == 404
    assert (await api.client.get("/revisions/fedcba9")).status_code == 400  # too short
    for typed in (rev, rev[:12], f"  {rev[:12].upper()} "):
        r = await api.client.get("/", params={"q": typed})
        assert r.status_code == 302 and r.headers["location"] == f"/objects/{rev}", typed
    author = first["record"]["author"]
    r = await api.client.get("/", params={"q": author[:16]})
    assert r.headers["location"] == f"/authors/{author}"
    r = await api.client.get(f"/authors/{author[:12]}")
    assert r.status_code == 302 and r.headers["location"] == f"/authors/{author}"
    # unknown: the catalogue says so, and searches the words as ever
    r = await api.client.get("/", params={"q": "fedcba9876543"})
    assert r.status_code == 200 and "No id begins with" in r.text
    # ambiguous: the candidates, each linked to its page
    actors = await _fake_actors(api, 3)
    r = await api.client.get("/", params={"q": SHARED})
    assert r.status_code == 200
    for a in actors:
        assert f'href="/authors/{a}"' in r.text
    assert "3 ids begin with" in r.text
    r = await api.client.get(f"/authors/{SHARED}")  # a page by an ambiguous prefix: 409
    assert r.status_code == 409 and "AMBIGUOUS_ID" in r.text
    assert all(f'href="/authors/{a}"' in r.text for a in actors)
    r = await api.client.get(f"/authors/{actors[0]}")
    assert r.status_code == 200


async def test_the_search_hint_says_what_matches(api: Api) -> None:
    await api.publish("owner", claim("Photosynthesis in algae"))
    page = (await api.client.get("/")).text
    assert "as a whole word" in page
    found = (await api.client.get("/", params={"q": "photosynthesis"})).text
    assert "Photosynthesis in algae" in found
    assert "Photosynthesis in algae" not in (await api.client.get("/", params={"q": "photo"})).text


def _entries(text: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr id="entry-(\d+)"', text)]


async def test_the_log_pages_both_ways_and_goes_to_an_entry(api: Api) -> None:
    for i in range(45):
        await api.publish("owner", claim(f"Claim number {i}"))
    size = int((await api.client.get("/api/log/checkpoint")).text.split("\n")[1])
    newest = await api.client.get("/log")
    assert _entries(newest.text) == list(range(size, size - LOG_PAGE_ENTRIES, -1))
    assert f'href="/log?before={size - LOG_PAGE_ENTRIES + 1}"' in newest.text
    assert "Newer entries" not in newest.text
    older = await api.client.get("/log", params={"before": size - LOG_PAGE_ENTRIES + 1})
    assert _entries(older.text) == list(range(size - LOG_PAGE_ENTRIES,
                                              size - 2 * LOG_PAGE_ENTRIES, -1))
    back = await api.client.get("/log", params={"after": size - LOG_PAGE_ENTRIES})
    assert _entries(back.text) == _entries(newest.text)
    oldest = await api.client.get("/log", params={"after": 0})
    assert _entries(oldest.text) == list(range(LOG_PAGE_ENTRIES, 0, -1))
    assert "Older entries" not in oldest.text and 'href="/log?after=20"' in oldest.text
    at = await api.client.get("/log", params={"entry": 7})
    assert 7 in _entries(at.text) and len(_entries(at.text)) == LOG_PAGE_ENTRIES
    assert '<tr id="entry-7" class="target" aria-current="true">' in at.text
    assert _entries((await api.client.get("/log", params={"before": 1})).text) == \
        _entries(oldest.text)
    assert _entries((await api.client.get("/log", params={"after": size + 5})).text) == \
        _entries(newest.text)
    for bad in ({"entry": str(size + 1)}, {"entry": "0"}, {"before": "x"},
                {"before": "3", "after": "1"}, {"offset": "20"}):
        r = await api.client.get("/log", params=bad)
        assert r.status_code == 400, (bad, r.status_code)


@pytest.mark.sqlite_only
async def test_a_revision_prefix_is_one_range_of_the_index_of_id_prefixes(api: Api) -> None:
    sql_plan: list[str] = []

    def explain(conn: Any) -> None:
        lo, hi = "01234567", "01234567g"
        sql_plan.extend(str(row[-1]) for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT id, root, sequence, title FROM revisions"
            " WHERE substr(id, 1, 16) >= ? AND substr(id, 1, 16) < ? AND id >= ? AND id < ?"
            " ORDER BY substr(id, 1, 16) LIMIT 21", (lo, hi, lo, hi)))

    await api.library.storage.read(explain)
    assert any("USING INDEX revisions_id" in line for line in sql_plan), sql_plan
    assert not any("TEMP B-TREE" in line for line in sql_plan), sql_plan


async def test_each_kind_is_a_range_of_an_index_on_either_backend(api: Api, backend: str
                                                                  ) -> None:
    """The planner can answer every lookup query from an index (PostgreSQL told to avoid
    sequential scans, as it would on a large table; SQLite as it plans)."""
    plans: list[str] = []
    lo, hi = "01234567", "01234567g"
    queries = [
        ("SELECT id, root, sequence, title FROM revisions WHERE substr(id, 1, 16) >= ? AND"
         " substr(id, 1, 16) < ? AND id >= ? AND id < ? ORDER BY substr(id, 1, 16) LIMIT 21",
         (lo, hi, lo, hi)),
        ("SELECT actor FROM catalogue_actors WHERE actor >= ? AND actor < ? ORDER BY actor"
         " LIMIT 21", (lo, hi)),
        ("SELECT key, min(sequence) FROM authorities WHERE key >= ? AND key < ? GROUP BY key"
         " ORDER BY key LIMIT 21", (lo, hi)),
    ]

    def explain(conn: Any) -> None:
        if backend == "postgresql":
            conn.execute("SET LOCAL enable_seqscan = off")
        for sql, params in queries:
            prefix = "EXPLAIN " if backend == "postgresql" else "EXPLAIN QUERY PLAN "
            plans.append(" | ".join(str(row[-1]) for row in conn.execute(prefix + sql, params)))

    await api.library.storage.read(explain)
    for plan in plans:
        assert "Seq Scan" not in plan and "SCAN " not in plan.replace("INDEX", ""), plans
        assert "Index" in plan or "INDEX" in plan, plans
