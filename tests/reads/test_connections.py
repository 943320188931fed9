"""``GET /api/entries/{revision}/connections`` (docs/objects.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.library import Api
from tests.support.objects import (
    claim,
    discussion,
    document,
    evidence,
    publish_example,
    read_view,
    refused_parameter,
    relationship,
    reply,
    revise,
    space,
    vote,
)


async def connections(api: Api, rev: str, **params: str) -> dict[str, Any]:
    return await read_view(api, f"/api/entries/{rev}/connections",
                           {"outgoing", "incoming", "history", "history_total", "next_offset"},
                           **params)


def sources(conn: dict[str, Any]) -> list[tuple[str, str]]:
    return [(i["source"], i["relation"]) for i in conn["incoming"]]


async def test_worked_example(api: Api) -> None:
    n = await publish_example(api)
    c = await connections(api, n["claim"])
    assert c["outgoing"] == [{"relation": "contained_in", "target": n["subspace"]}]
    assert c["incoming"] == [
        {"source": n["discussion"], "relation": "about", "title": "Discussion"},
        {"source": n["evidence"], "relation": "evidence_for", "title": "Evidence"},
        {"source": n["assessment"], "relation": "assesses", "title": "Assessment"},
        {"source": n["relationship"], "relation": "relates_from", "title": "Relationship"},
        {"source": n["proposal"], "relation": "proposes_for", "title": "Proposal"},
    ]
    assert c["history"] == [n["claim"], n["merge"]] and c["history_total"] == 2
    assert c["next_offset"] is None
    # the merge revision: its own links, nothing names it yet, the same history
    m = await connections(api, n["merge"])
    assert m["outgoing"] == [
        {"relation": "contained_in", "target": n["subspace"]},
        {"relation": "merges", "target": n["proposal"]},
    ]
    assert m["incoming"] == [] and m["history"] == c["history"]
    p = await connections(api, n["proposal"])
    assert sources(p) == [(n["merge"], "merges")]
    s = await connections(api, n["space"])
    assert sources(s) == [(n["subspace"], "contained_in"), (n["document"], "contained_in")]
    rel = await connections(api, n["relationship"])
    assert rel["outgoing"] == [
        {"relation": "relates_from", "target": n["claim"]},
        {"relation": "relates_to", "target": n["document"]},
    ]


async def test_incoming_names_the_exact_revision_from_current_heads(api: Api) -> None:
    s = (await api.publish("owner", space("S")))["id"]
    c1 = (await api.publish("owner", claim("C", s)))["id"]
    d1 = (await api.publish("peer", discussion("D", about=c1, cites=(c1,))))["id"]
    e1 = (await api.publish("peer", evidence(c1, "for c1")))["id"]
    c2 = (await api.publish("owner", revise(claim("C", s), c1, title="C2")))["id"]
    e2 = (await api.publish("peer", evidence(c2, "for c2")))["id"]
    assert sources(await connections(api, c1)) == [
        (d1, "about"), (d1, "cites"), (e1, "evidence_for"),
    ]
    assert sources(await connections(api, c2)) == [(e2, "evidence_for")]
    # a revision of the source: the current head holds the link; a dropped citation is history
    d2 = (await api.publish("peer", revise(discussion("D", about=c1), d1)))["id"]
    assert sources(await connections(api, c1)) == [(e1, "evidence_for"), (d2, "about")]
    old = await connections(api, d1)
    assert {"relation": "cites", "target": c1} in old["outgoing"]
    # contents of a space are connections of its root revision
    s2 = (await api.publish("owner", revise(space("S"), s, title="S2")))["id"]
    assert sources(await connections(api, s)) == [(c2, "contained_in")]
    assert sources(await connections(api, s2)) == []
    # titles are the source head's
    assert (await connections(api, c1))["incoming"][1]["title"] == "D"


async def test_votes_are_not_connections(api: Api) -> None:
    c = (await api.publish("owner", claim("C")))["id"]
    v = (await api.publish("peer", vote(c)))["id"]
    r = (await api.publish("peer", document("Cites", cites=(c,))))["id"]
    assert sources(await connections(api, c)) == [(r, "cites")]
    own = await connections(api, v)
    assert own["outgoing"] == [{"relation": "votes_on", "target": c}]


async def test_replies_and_branches(api: Api) -> None:
    d = (await api.publish("peer", discussion("D")))["id"]
    r1 = (await api.publish("owner", reply(d, "first")))["id"]
    r2 = (await api.publish("peer", reply(r1, "answer", "answers")))["id"]
    b = (await api.publish("peer", discussion("Branch", branches_from=r1)))["id"]
    assert sources(await connections(api, d)) == [(r1, "replies_to")]
    assert sources(await connections(api, r1)) == [(r2, "answers"), (b, "branches_from")]
    assert (await connections(api, r2))["outgoing"] == [{"relation": "answers", "target": r1}]


async def test_paging_incoming_and_history_together(api: Api) -> None:
    c = (await api.publish("owner", claim("C")))["id"]
    evidence_ids = [
        (await api.publish("peer", evidence(c, f"piece {i}")))["id"] for i in range(123)
    ]
    revs = [c]
    for i in range(54):
        revs.append((await api.publish("owner", revise(claim(f"C v{i}"), revs[-1])))["id"])
    seen: list[str] = []
    history: list[str] = []
    offset = 0
    pages = 0
    while True:
        page = await connections(api, c, offset=str(offset))
        assert len(page["incoming"]) <= 50 and len(page["history"]) <= 50
        assert page["history_total"] == 55
        seen += [i["source"] for i in page["incoming"]]
        history += page["history"]
        pages += 1
        if page["next_offset"] is None:
            break
        assert page["next_offset"] == offset + 50
        offset = page["next_offset"]
    assert pages == 3 and seen == evidence_ids and history == revs
    # the history outlasts the incoming list on the head revision, which nothing names
    last = await connections(api, revs[-1], offset="50")
    assert last["incoming"] == [] and last["history"] == revs[50:]
    assert last["next_offset"] is None
    first = await connections(api, revs[-1])
    assert first["next_offset"] == 50
    beyond = await connections(api, c, offset="1000")
    assert beyond["incoming"] == beyond["history"] == [] and beyond["next_offset"] is None


async def test_relationship_endpoints(api: Api) -> None:
    a = (await api.publish("owner", claim("A")))["id"]
    b = (await api.publish("owner", document("B")))["id"]
    r = (await api.publish("peer", relationship(a, b)))["id"]
    assert sources(await connections(api, a)) == [(r, "relates_from")]
    assert sources(await connections(api, b)) == [(r, "relates_to")]


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("offset=-5", "BAD_PARAMETER"),
        ("offset=x", "BAD_PARAMETER"),
        ("offset=", "BAD_PARAMETER"),
        ("section=all", "UNKNOWN_PARAMETER"),
        ("offset=0&offset=50", "REPEATED_PARAMETER"),
    ],
)
async def test_bad_parameters_are_400(api: Api, query: str, code: str) -> None:
    c = (await api.publish("owner", claim("C")))["id"]
    await refused_parameter(api, f"/api/entries/{c}/connections", query, code)


async def test_bad_and_unknown_revisions(api: Api) -> None:
    r = await api.client.get("/api/entries/not-a-revision/connections")
    assert r.status_code == 400 and r.json()["code"] == "BAD_REVISION"
    r = await api.client.get(f"/api/entries/{'f' * 64}/connections")
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_REVISION"
