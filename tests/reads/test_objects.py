"""``GET /api/objects/{revision}``: every section, ``exact`` and ``offset`` (docs/objects.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.library import Api
from tests.support.objects import (
    assessment,
    claim,
    discussion,
    document,
    evidence,
    ids,
    publish_example,
    refused_parameter,
    relationship,
    reply,
    revise,
    space,
    vote,
)

SECTIONS = ("all", "children", "related", "history", "graph", "discussions", "knowledge")


async def view(api: Api, rev: str, **params: str) -> dict[str, Any]:
    r = await api.client.get(f"/api/objects/{rev}", params=params)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert set(out) == {
        "item", "head", "original", "ancestors", "items", "revisions", "next_offset",
    }
    return out


async def section(api: Api, rev: str, name: str, **params: str) -> list[str]:
    return ids((await view(api, rev, section=name, **params))["items"])


async def every_page(api: Api, rev: str, name: str, **params: str) -> list[str]:
    """Follow ``next_offset`` to the end, checking each page's size and offsets."""
    out: list[str] = []
    offset = 0
    while True:
        page = await view(api, rev, section=name, offset=str(offset), **params)
        assert len(page["items"]) <= 50
        out += ids(page["items"])
        if page["next_offset"] is None:
            return out
        assert len(page["items"]) == 50 and page["next_offset"] == offset + 50
        offset = page["next_offset"]


async def test_worked_example_object_fields(api: Api) -> None:
    n = await publish_example(api)
    entry = (await api.client.get(f"/api/entries/{n['merge']}")).json()
    original = (await api.client.get(f"/api/entries/{n['claim']}")).json()
    for rev in (n["claim"], n["merge"]):
        v = await view(api, rev)
        assert v["item"] == entry and v["head"] == n["merge"] and v["original"] == original
        assert v["revisions"] == 2
        assert ids(v["ancestors"]) == [n["space"], n["subspace"]]  # root first
    exact = await view(api, n["claim"], exact="true")
    assert exact["item"] == original and exact["head"] == n["merge"]
    # stored bytes are spliced unchanged: the item is byte for byte the entry
    raw = (await api.client.get(f"/api/objects/{n['merge']}")).content
    assert (await api.client.get(f"/api/entries/{n['merge']}")).content in raw
    assert (await view(api, n["space"]))["ancestors"] == []
    assert ids((await view(api, n["subspace"]))["ancestors"]) == [n["space"]]
    # a reply's spaces are its discussion's; evidence's and a proposal's are their claim's
    for name in ("reply", "branch", "evidence", "assessment", "proposal"):
        assert ids((await view(api, n[name]))["ancestors"]) == [n["space"], n["subspace"]], name
    assert (await view(api, n["relationship"]))["ancestors"] == []


async def test_worked_example_sections(api: Api) -> None:
    n = await publish_example(api)
    expected: dict[tuple[str, str], list[str]] = {
        ("space", "all"): ["subspace", "merge", "discussion", "reply", "branch", "evidence",
                           "assessment", "document", "proposal"],
        ("space", "children"): ["subspace", "document"],
        ("space", "related"): [],
        ("space", "history"): ["space"],
        ("space", "graph"): ["relationship"],  # its child document is an endpoint
        ("space", "discussions"): [],
        ("space", "knowledge"): ["document"],
        ("subspace", "children"): ["merge", "discussion"],
        ("subspace", "discussions"): ["discussion"],
        ("subspace", "knowledge"): ["merge"],
        ("subspace", "graph"): ["relationship"],
        ("claim", "all"): ["discussion", "reply", "branch", "evidence", "assessment",
                           "proposal"],
        ("claim", "children"): ["discussion", "evidence", "assessment", "proposal"],
        # the head (merge) links to the proposal; the relationship links to the claim
        ("claim", "related"): ["proposal", "relationship"],
        ("claim", "history"): ["claim", "merge"],
        ("claim", "graph"): ["relationship"],
        ("claim", "discussions"): ["discussion"],
        ("claim", "knowledge"): ["evidence", "assessment"],
        ("discussion", "all"): ["reply", "branch"],
        ("discussion", "children"): ["reply"],
        ("discussion", "related"): ["claim"],  # its about link (exact claim revision)
        ("discussion", "discussions"): [],
        ("discussion", "knowledge"): [],
        ("discussion", "graph"): [],
        ("reply", "children"): ["branch"],
        ("reply", "discussions"): ["branch"],
        ("reply", "related"): ["discussion"],
        ("document", "related"): ["relationship"],
        ("document", "graph"): ["relationship"],
        ("document", "knowledge"): [],
        ("evidence", "related"): ["claim"],
        ("evidence", "children"): [],
        ("relationship", "related"): ["claim", "document"],
        ("relationship", "all"): [],
        ("proposal", "related"): ["claim", "merge"],
        ("proposal", "children"): [],
    }
    for (name, sec), want in expected.items():
        got = await section(api, n[name], sec)
        assert got == [n[w] for w in want], (name, sec)
    # the claim's object view is the same from any of its revisions
    for sec in SECTIONS:
        assert await section(api, n["claim"], sec) == await section(api, n["merge"], sec)


async def test_items_are_current_heads_and_votes_never_appear(api: Api) -> None:
    s = (await api.publish("owner", space("S")))["id"]
    c1 = (await api.publish("owner", claim("C", s)))["id"]
    c2 = (await api.publish("owner", revise(claim("C", s), c1, title="C, revised")))["id"]
    await api.publish("peer", vote(s))
    await api.publish("peer", vote(c1, "-1"))
    assert await section(api, s, "children") == [c2]
    assert await section(api, s, "all") == [c2]
    assert await section(api, s, "knowledge") == [c2]
    for sec in SECTIONS:
        for rev in (s, c1):
            items = (await view(api, rev, section=sec))["items"]
            assert all(i["record"]["kind"] != "vote" for i in items), (rev, sec)


async def test_exact_pins_the_revision(api: Api) -> None:
    owner = "owner"
    s = (await api.publish(owner, space("S")))["id"]
    c1 = (await api.publish(owner, claim("C", s)))["id"]
    e1 = (await api.publish("peer", evidence(c1, "first")))["id"]
    a1 = (await api.publish(owner, assessment(c1, [e1])))["id"]
    c2 = (await api.publish(owner, revise(claim("C", s), c1, title="C2")))["id"]
    e2 = (await api.publish("peer", evidence(c2, "second")))["id"]
    d1 = (await api.publish("peer", discussion("D about c1", about=c1)))["id"]
    d2 = (await api.publish("peer", discussion("D about c2", about=c2)))["id"]
    doc = (await api.publish(owner, document("Doc", s)))["id"]
    r1 = (await api.publish(owner, relationship(c1, doc)))["id"]
    r2 = (await api.publish(owner, relationship(doc, c2, "depends_on")))["id"]
    cite = (await api.publish("peer", document("Citing c2", cites=(c2,))))["id"]
    # the object view: links to any revision
    assert await section(api, c1, "knowledge") == [e1, a1, e2]
    assert await section(api, c1, "discussions") == [d1, d2]
    assert await section(api, c1, "children") == [e1, a1, e2, d1, d2]
    assert await section(api, c1, "graph") == [r1, r2]
    assert await section(api, c1, "related") == [r1, r2, cite]
    # pinned: only links naming that exact revision
    assert await section(api, c1, "knowledge", exact="true") == [e1, a1]
    assert await section(api, c2, "knowledge", exact="true") == [e2]
    assert await section(api, c1, "discussions", exact="true") == [d1]
    assert await section(api, c2, "children", exact="true") == [e2, d2]
    assert await section(api, c1, "graph", exact="true") == [r1]
    assert await section(api, c2, "graph", exact="true") == [r2]
    assert await section(api, c2, "related", exact="true") == [r2, cite]
    assert await section(api, c1, "related", exact="true") == [r1]
    # containment names the space root: contents show on the root revision only
    s2 = (await api.publish(owner, revise(space("S"), s, title="S2")))["id"]
    assert await section(api, s, "children", exact="true") == [c2, doc]
    assert await section(api, s2, "children", exact="true") == []
    assert await section(api, s2, "children") == [c2, doc]
    # all and history describe the whole object
    for sec in ("all", "history"):
        assert await section(api, c1, sec, exact="true") == await section(api, c1, sec)
    assert await section(api, c1, "history") == [c1, c2]
    v = await view(api, c1, exact="true")
    assert v["item"]["id"] == c1 and v["head"] == c2 and v["original"]["id"] == c1


async def test_related_outgoing_then_incoming(api: Api) -> None:
    s = (await api.publish("owner", space("S")))["id"]
    a = (await api.publish("owner", claim("A", s)))["id"]
    b = (await api.publish("owner", claim("B", s)))["id"]
    # outgoing: every link of the item but contained_in, exact targets, each once
    c = (await api.publish("owner", claim("C", s, cites=(a, b, a))))["id"]
    x = (await api.publish("peer", document("X cites C", cites=(c,))))["id"]
    y = (await api.publish("peer", document("Y cites C twice", cites=(c, c))))["id"]
    inc = (await api.publish("owner", space("Includes C", includes=(c,))))["id"]
    assert await section(api, c, "related") == [a, b, x, y, inc]
    # a citation its source dropped is history; a kept one shows the new head
    x2 = (await api.publish("peer", revise(document("X", cites=()), x)))["id"]
    y2 = (await api.publish("peer", revise(document("Y", cites=(c,)), y)))["id"]
    assert await section(api, c, "related") == [a, b, inc, y2]
    assert x2 not in await section(api, c, "related")
    # the outgoing part follows the item: the head, or the pinned revision
    c2 = (await api.publish("owner", revise(claim("C", s, cites=(b,)), c)))["id"]
    assert await section(api, c, "related") == [b, inc, y2]
    assert await section(api, c, "related", exact="true") == [a, b, inc, y2]
    # an object's links to its own earlier revisions are not "related" to itself
    c3 = (await api.publish("owner", revise(claim("C", s, cites=(c,)), c2)))["id"]
    assert await section(api, c3, "related") == [c, inc, y2]


async def test_graph_retains_exact_endpoints(api: Api) -> None:
    s = (await api.publish("owner", space("S")))["id"]
    inner = (await api.publish("owner", claim("Inner", s)))["id"]
    outside = (await api.publish("peer", claim("Outside")))["id"]
    far = (await api.publish("peer", claim("Far")))["id"]
    included = (await api.publish("peer", document("Included")))["id"]
    r_child = (await api.publish("peer", relationship(inner, outside)))["id"]
    r_far = (await api.publish("peer", relationship(outside, far)))["id"]
    r_inc = (await api.publish("peer", relationship(far, included, "related_to")))["id"]
    r_self = (await api.publish("peer", relationship(s, far, "related_to")))["id"]
    r_both = (await api.publish("peer", relationship(inner, included)))["id"]
    assert await section(api, s, "graph") == [r_child, r_self, r_both]
    s2 = (await api.publish("owner", revise(space("S", includes=(included,)), s)))["id"]
    assert await section(api, s, "graph") == [r_child, r_inc, r_self, r_both]
    # exact: the pinned root revision includes nothing; the head includes the document
    assert await section(api, s, "graph", exact="true") == [r_child, r_self, r_both]
    assert await section(api, s2, "graph", exact="true") == [r_inc, r_both]
    assert r_far not in await section(api, s, "graph")
    # a newer revision of an endpoint does not rewrite the relationship
    inner2 = (await api.publish("owner", revise(claim("Inner", s), inner, title="Inner 2")))
    rel = (await view(api, s, section="graph"))["items"][0]
    assert rel["record"]["links"][0]["target"] == inner != inner2["id"]
    # knowledge of the space: the included exact document first, then contained claims
    assert await section(api, s, "knowledge") == [included, inner2["id"]]


async def test_nested_spaces_ancestors_and_all(api: Api) -> None:
    chain = [(await api.publish("owner", space("L0")))["id"]]
    for depth in range(1, 6):
        chain.append((await api.publish("owner", space(f"L{depth}", chain[-1])))["id"])
    leaf = (await api.publish("peer", claim("Deep", chain[-1])))["id"]
    d = (await api.publish("peer", discussion("About L2", about=chain[2])))["id"]
    r = (await api.publish("owner", reply(d, "deep reply")))["id"]
    assert ids((await view(api, leaf))["ancestors"]) == chain
    assert ids((await view(api, r))["ancestors"]) == chain[:3]
    assert await section(api, chain[0], "all") == [*chain[1:], leaf, d, r]
    assert await section(api, chain[2], "all") == [*chain[3:], leaf, d, r]
    assert await section(api, chain[2], "discussions") == [d]
    # revising an ancestor space: ancestors show its current head
    top2 = (await api.publish("owner", revise(space("L0"), chain[0], title="L0 renamed")))
    assert ids((await view(api, leaf))["ancestors"]) == [top2["id"], *chain[1:]]


async def test_ancestors_of_an_object_deeper_than_one_statement_allows(api: Api) -> None:
    """A reply chain has no depth bound: an object whose ``objects.ancestors`` names more
    objects than SQLite (32,766) or PostgreSQL (65,535) binds in one statement still has its
    ancestor spaces found (a chain that deep is simulated by naming 70,000 further objects
    keys, none of them a space's)."""
    top = (await api.publish("owner", space("Top")))["id"]
    inner = (await api.publish("owner", space("Inner", top)))["id"]
    d = (await api.publish("peer", discussion("About inner", about=inner)))["id"]
    r = (await api.publish("owner", reply(d, "deep reply")))["id"]
    padding = " ".join(str(10**9 + i) for i in range(1, 70_001))

    def deepen(conn: Any) -> None:
        conn.execute("UPDATE objects SET ancestors = ancestors || ' ' || ? WHERE root = ?",
                     (padding, r))

    await api.library.storage.write(deepen)
    assert ids((await view(api, r))["ancestors"]) == [top, inner]


async def test_space_discussions_each_once(api: Api) -> None:
    s = (await api.publish("owner", space("S")))["id"]
    inside = (await api.publish("peer", discussion("Inside", parent=s)))["id"]
    both = (await api.publish("peer", discussion("Both", parent=s, about=s)))["id"]
    about = (await api.publish("peer", discussion("About", about=s)))["id"]
    elsewhere = (await api.publish("peer", space("Elsewhere")))["id"]
    await api.publish("peer", discussion("Not here", parent=elsewhere, about=elsewhere))
    assert await section(api, s, "discussions") == [inside, both, about]
    assert await section(api, s, "children") == [inside, both, about]


async def test_paging_every_section(api: Api) -> None:
    """Over 120 items in several sections; every page is at most 50 and pages join up."""
    s = (await api.publish("owner", space("Big")))["id"]
    other = (await api.publish("peer", space("Other")))["id"]
    included = [(await api.publish("peer", claim(f"Inc {i}", other)))["id"] for i in range(3)]
    s_head = (await api.publish(
        "owner", revise(space("Big", includes=tuple(included)), s)))["id"]
    claims = [(await api.publish("owner", claim(f"C{i}", s)))["id"] for i in range(125)]
    debates = [(await api.publish("peer", discussion(f"D{i}", about=s)))["id"] for i in range(55)]
    rels = [
        (await api.publish("peer", relationship(claims[i], claims[i + 1])))["id"]
        for i in range(60)
    ]
    citing = [
        (await api.publish("peer", document(f"Cites {i}", cites=(s_head,))))["id"]
        for i in range(52)
    ]
    contents = [*claims, *debates]
    assert await every_page(api, s, "children") == contents
    assert await every_page(api, s, "all") == contents
    assert await every_page(api, s, "knowledge") == [*included, *claims]
    assert await every_page(api, s, "discussions") == debates
    assert await every_page(api, s, "graph") == rels
    assert await every_page(api, s, "related") == [*included, *citing]
    # a claim revised past a page
    c = claims[0]
    revs = [c]
    for i in range(54):
        revs.append((await api.publish("owner", revise(claim(f"C0 v{i}", s), revs[-1])))["id"])
    assert await every_page(api, c, "history") == revs
    v = await view(api, c, section="history", offset="50")
    assert v["revisions"] == 55 and v["head"] == revs[-1] and len(v["items"]) == 5
    # a knowledge page straddling the included prefix and the contained claims
    page = await view(api, s, section="knowledge", offset="2")
    assert ids(page["items"]) == [included[2], revs[-1], *claims[1:49]]
    assert page["next_offset"] == 52
    # past the end
    end = await view(api, s, section="children", offset="100000")
    assert end["items"] == [] and end["next_offset"] is None


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("section=everything", "BAD_PARAMETER"),
        ("section=", "BAD_PARAMETER"),
        ("offset=-1", "BAD_PARAMETER"),
        ("offset=01", "BAD_PARAMETER"),
        ("offset=1.5", "BAD_PARAMETER"),
        ("offset=9007199254740992", "BAD_PARAMETER"),
        ("exact=yes", "BAD_PARAMETER"),
        ("exact=TRUE", "BAD_PARAMETER"),
        ("sort=new", "UNKNOWN_PARAMETER"),
        ("section=all&section=history", "REPEATED_PARAMETER"),
    ],
)
async def test_bad_parameters_are_400(api: Api, query: str, code: str) -> None:
    s = (await api.publish("owner", space("S")))["id"]
    await refused_parameter(api, f"/api/objects/{s}", query, code)


async def test_bad_and_unknown_revisions(api: Api) -> None:
    for bad in ("abc", "A" * 64, "g" * 64, "0" * 63, "0" * 65):
        r = await api.client.get(f"/api/objects/{bad}")
        assert r.status_code == 400 and r.json()["code"] == "BAD_REVISION", bad
    r = await api.client.get(f"/api/objects/{'0' * 64}")
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_REVISION"
    assert r.json()["details"] == {"revision": "0" * 64}
    # a malformed revision is reported before a bad parameter; an unknown one after
    r = await api.client.get("/api/objects/xyz?section=nope")
    assert r.json()["code"] == "BAD_REVISION"
    r = await api.client.get(f"/api/objects/{'0' * 64}?section=nope")
    assert r.status_code == 400 and r.json()["code"] == "BAD_PARAMETER"
