"""``GET /api/entries/{revision}/discussion`` (docs/objects.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.library import Api
from tests.support.objects import (
    claim,
    discussion,
    document,
    evidence,
    ids,
    publish_example,
    read_view,
    refused_parameter,
    reply,
    revise,
    space,
    vote,
)


async def conversation(api: Api, rev: str, **params: str) -> dict[str, Any]:
    return await read_view(api, f"/api/entries/{rev}/discussion",
                           {"items", "total", "next_offset"}, **params)


async def listed(api: Api, rev: str, **params: str) -> list[str]:
    return ids((await conversation(api, rev, **params))["items"])


async def test_worked_example(api: Api) -> None:
    n = await publish_example(api)
    d = await conversation(api, n["discussion"])
    assert ids(d["items"]) == [n["reply"], n["branch"]] and d["total"] == 2
    assert d["next_offset"] is None
    assert await listed(api, n["reply"]) == [n["branch"]]
    assert await listed(api, n["claim"]) == [n["discussion"]]
    assert await listed(api, n["merge"]) == [n["discussion"]]  # the object's conversation
    assert await listed(api, n["subspace"]) == [n["discussion"]]  # contained in it
    assert await listed(api, n["space"]) == []
    for name in ("document", "evidence", "assessment", "relationship", "proposal", "branch"):
        empty = await conversation(api, n[name])
        assert empty == {"items": [], "total": 0, "next_offset": None}, name
    # items are the signed records as served by /api/entries
    raw = (await api.client.get(f"/api/entries/{n['discussion']}/discussion")).content
    assert (await api.client.get(f"/api/entries/{n['reply']}")).content in raw


async def test_thread_is_transitive_with_branches_and_heads(api: Api) -> None:
    d = (await api.publish("peer", discussion("D")))["id"]
    r1 = (await api.publish("owner", reply(d, "one")))["id"]
    r2 = (await api.publish("peer", reply(r1, "two")))["id"]
    r3 = (await api.publish("owner", reply(r2, "three", "answers")))["id"]
    b = (await api.publish("peer", discussion("Branch", branches_from=r2)))["id"]
    rb = (await api.publish("owner", reply(b, "in the branch")))["id"]
    other = (await api.publish("peer", discussion("Other")))["id"]
    await api.publish("owner", reply(other, "elsewhere"))
    r1b = (await api.publish("owner", revise(reply(d, "one, edited"), r1)))["id"]
    assert await listed(api, d) == [r1b, r2, r3, b, rb]
    assert await listed(api, r2) == [r3, b, rb]
    assert await listed(api, b) == [rb]
    # a reply's revision has the same conversation; edits do not move a reply
    assert await listed(api, r1b) == [r2, r3, b, rb]
    assert (await conversation(api, d))["total"] == 5
    assert await listed(api, d, sort="new") == [rb, b, r3, r2, r1b]


async def test_debates_of_claims_and_spaces(api: Api) -> None:
    s = (await api.publish("owner", space("S")))["id"]
    c = (await api.publish("owner", claim("C", s)))["id"]
    about_c = (await api.publish("peer", discussion("On C", about=c)))["id"]
    await api.publish("owner", reply(about_c, "replies stay in the debate's own thread"))
    await api.publish("peer", evidence(c, "not a discussion"))
    inside = (await api.publish("peer", discussion("In S", parent=s)))["id"]
    both = (await api.publish("peer", discussion("In and on S", parent=s, about=s)))["id"]
    on_s = (await api.publish("peer", discussion("On S", about=s)))["id"]
    assert await listed(api, c) == [about_c]
    assert await listed(api, s) == [inside, both, on_s]
    assert (await conversation(api, s))["total"] == 3
    assert await listed(api, s, sort="new") == [on_s, both, inside]
    # a document cannot be discussed
    doc = (await api.publish("owner", document("Doc", s)))["id"]
    assert (await conversation(api, doc))["total"] == 0


async def test_top_follows_current_votes(api: Api) -> None:
    api.founding.enroll("third")
    d = (await api.publish("peer", discussion("D")))["id"]
    r1 = (await api.publish("owner", reply(d, "one")))["id"]
    r2 = (await api.publish("peer", reply(d, "two")))["id"]
    r3 = (await api.publish("owner", reply(d, "three")))["id"]
    r4 = (await api.publish("peer", reply(d, "four")))["id"]
    # no votes: ties newest first
    assert await listed(api, d, sort="top") == [r4, r3, r2, r1]
    await api.publish("owner", vote(r2))
    await api.publish("third", vote(r2))
    v = (await api.publish("peer", vote(r1)))["id"]
    await api.publish("third", vote(r4, "-1"))
    assert await listed(api, d, sort="top") == [r2, r1, r3, r4]
    # a revised vote counts with its current value
    await api.publish("peer", vote(r1, "-1", previous=v))
    assert await listed(api, d, sort="top") == [r2, r3, r4, r1]  # r4 and r1 tie at -1
    # votes rank the object, whichever of its revisions is the head
    r3b = (await api.publish("owner", revise(reply(d, "three, edited"), r3)))["id"]
    await api.publish("peer", vote(r3))
    await api.publish("third", vote(r3))
    await api.publish("owner", vote(r3))
    assert await listed(api, d, sort="top") == [r3b, r2, r4, r1]
    # ties go to the newest head, as in the catalogue: an edit is news
    r1b = (await api.publish("owner", revise(reply(d, "one, edited"), r1)))["id"]
    assert await listed(api, d, sort="top") == [r3b, r2, r1b, r4]
    assert await listed(api, d, sort="new") == [r4, r3b, r2, r1b]  # new: by creation
    top = await conversation(api, d, sort="top", offset="1")
    assert ids(top["items"]) == [r2, r1b, r4] and top["total"] == 4


async def test_paging_a_long_thread(api: Api) -> None:
    d = (await api.publish("peer", discussion("Long")))["id"]
    replies = [(await api.publish("owner", reply(d, f"reply {i}")))["id"] for i in range(124)]
    for sort, expected in (("old", replies), ("new", replies[::-1]), ("top", replies[::-1])):
        got: list[str] = []
        offset = 0
        while True:
            page = await conversation(api, d, sort=sort, offset=str(offset))
            assert page["total"] == 124 and len(page["items"]) <= 50
            got += ids(page["items"])
            if page["next_offset"] is None:
                break
            assert len(page["items"]) == 50 and page["next_offset"] == offset + 50
            offset = page["next_offset"]
        assert got == expected, sort
    end = await conversation(api, d, offset="124")
    assert end["items"] == [] and end["next_offset"] is None and end["total"] == 124


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("sort=best", "BAD_PARAMETER"),
        ("sort=", "BAD_PARAMETER"),
        ("sort=NEW", "BAD_PARAMETER"),
        ("offset=-1", "BAD_PARAMETER"),
        ("offset=ten", "BAD_PARAMETER"),
        ("section=all", "UNKNOWN_PARAMETER"),
        ("sort=new&sort=old", "REPEATED_PARAMETER"),
    ],
)
async def test_bad_parameters_are_400(api: Api, query: str, code: str) -> None:
    d = (await api.publish("peer", discussion("D")))["id"]
    body = await refused_parameter(api, f"/api/entries/{d}/discussion", query, code)
    if code == "BAD_PARAMETER" and query.startswith("sort"):
        assert body["details"]["allowed"] == ["old", "new", "top"]


async def test_bad_and_unknown_revisions(api: Api) -> None:
    r = await api.client.get(f"/api/entries/{'F' * 64}/discussion")
    assert r.status_code == 400 and r.json()["code"] == "BAD_REVISION"
    r = await api.client.get(f"/api/entries/{'e' * 64}/discussion?sort=top")
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_REVISION"
