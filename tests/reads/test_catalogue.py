"""``GET /api/catalogue`` through the real app: every parameter, view, sort and projection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from alexandria.core.search_text import SNIPPET_CHARACTERS
from tests.support.catalogue import (
    catalogue,
    document,
    publish_example,
    vote,
    walk,
)
from tests.support.library import Api

OBJECTS = {"space", "discussion", "claim", "document", "evidence", "assessment",
           "relationship", "proposal"}
FEED = {"discussion", "claim", "document", "evidence", "proposal"}


def ids(page: dict[str, Any]) -> list[str]:
    return [item["id"] for item in page["items"]]


async def test_worked_example_lists_every_non_vote_head_as_stored(api: Api) -> None:
    names = await publish_example(api)
    await api.publish("peer", vote(names["claim"], "1"))
    page = await catalogue(api)
    assert page["library"] == api.founding.genesis.library
    # 12 steps, the merge is a revision of the claim: 11 objects, newest head first
    assert page["total"] == 11 and page["next_offset"] is None
    assert [i["record"]["kind"] for i in page["items"]].count("vote") == 0
    assert ids(page)[0] == names["merge"]
    assert names["claim"] not in ids(page)  # the old head left the catalogue
    sequences = [i["admission"]["sequence"] for i in page["items"]]
    assert sequences == sorted(sequences, reverse=True)
    # items are the stored signed records, byte for byte
    raw = (await api.client.get("/api/catalogue")).content
    for item in page["items"]:
        entry = await api.client.get(f"/api/entries/{item['id']}")
        assert entry.content in raw


async def test_views_and_kind(api: Api) -> None:
    await publish_example(api)
    kinds = {v: {i["record"]["kind"] for i in (await catalogue(api, view=v))["items"]}
             for v in ("all", "current", "feed")}
    assert kinds["all"] == OBJECTS | {"reply"}
    assert kinds["current"] == OBJECTS
    assert kinds["feed"] == FEED
    assert (await catalogue(api, view="current"))["total"] == 10
    assert (await catalogue(api, view="feed"))["total"] == 6
    discussions = await catalogue(api, kind="discussion")
    assert [i["record"]["title"] for i in discussions["items"]] == ["Branch", "Discussion"]
    assert (await catalogue(api, kind="reply", view="current"))["total"] == 0
    assert (await catalogue(api, kind="reply"))["total"] == 1
    assert (await catalogue(api, kind="space", view="feed"))["items"] == []


async def test_author_method_and_verdict_filters(api: Api) -> None:
    names = await publish_example(api)
    owner = api.founding.participants["owner"].actor
    peer = api.founding.participants["peer"].actor
    mine = await catalogue(api, author=peer)
    assert {i["record"]["title"] for i in mine["items"]} == {
        "Discussion", "Branch", "Evidence", "Proposal"}
    assert mine["total"] == 4
    assert (await catalogue(api, author=owner))["total"] == 7
    assert (await catalogue(api, author="ab" * 32))["total"] == 0
    ex = await catalogue(api, method="example")
    assert ids(ex) == [names["evidence"]] and ex["total"] == 1
    assert (await catalogue(api, method="proof"))["total"] == 0
    sup = await catalogue(api, verdict="supported")
    assert ids(sup) == [names["assessment"]] and sup["total"] == 1
    assert (await catalogue(api, verdict="refuted"))["total"] == 0
    assert (await catalogue(api, method="example", verdict="supported"))["total"] == 0
    assert (await catalogue(api, method="example", kind="claim"))["total"] == 0
    assert (await catalogue(api, method="example", author=owner))["total"] == 0
    assert (await catalogue(api, method="example", author=peer, view="feed"))["total"] == 1
    assert (await catalogue(api, verdict="supported", view="feed"))["total"] == 0


async def test_summary_projection(api: Api) -> None:
    names = await publish_example(api)
    long_text = "word " * 100
    doc = await api.publish("owner", document("Long", long_text))
    page = await catalogue(api, projection="summary")
    for item in page["items"]:
        assert list(item) == ["id", "root", "title", "kind", "author", "authored_at", "snippet"]
        assert len(item["snippet"]) <= SNIPPET_CHARACTERS
    by_id = {i["id"]: i for i in page["items"]}
    # the snippet is the first 280 characters of the signed body string, literally
    for rev, item in by_id.items():
        record = (await api.client.get(f"/api/entries/{rev}")).json()["record"]
        assert item["snippet"] == record["body"][:SNIPPET_CHARACTERS]
    assert by_id[doc["id"]]["snippet"] == ('{"text":"' + long_text)[:SNIPPET_CHARACTERS]
    merged = by_id[names["merge"]]
    assert merged["root"] == names["claim"] and merged["kind"] == "claim"
    assert merged["title"] == "One plus one equals two"
    assert merged["snippet"].startswith('{"assumptions":["Successor definition of addition"]')
    reply = by_id[names["reply"]]
    assert reply["snippet"] == "Yes: state which addition operation is meant."


async def test_relevance_weights_title_three_body_one_ties_newest(api: Api) -> None:
    # scores for "zebra": a = 3 (title once), b = 2 (body twice), c = 3 (body three times),
    # d = 5 (title once + body twice), e = 0 (no match)
    a = await api.publish("owner", document("Zebra crossing", "a road marking"))
    b = await api.publish("owner", document("Stripes", "zebra and zebra"))
    c = await api.publish("peer", document("Animals", "zebra, ZEBRA; Zebra!"))
    d = await api.publish("peer", document("The zebra", "a zebra is a zebra-like horse"))
    await api.publish("peer", document("Horses", "no stripes here"))
    # d: title once (3) and body twice, "zebra-like" being the words zebra and like: 3 + 2
    page = await catalogue(api, q="zebra")
    assert page["total"] == 4
    assert ids(page) == [d["id"], c["id"], a["id"], b["id"]]  # 5, 3 (newer), 3, 2
    assert ids(await catalogue(api, q="zebra", sort="relevance")) == ids(page)
    assert ids(await catalogue(api, q="zebra", sort="new")) == [
        d["id"], c["id"], b["id"], a["id"]]
    # every token must match
    both = await catalogue(api, q="zebra stripes")
    assert ids(both) == [b["id"]]
    assert (await catalogue(api, q="zebra giraffe"))["total"] == 0


async def test_query_is_normalised_and_never_syntax(api: Api) -> None:
    doc = await api.publish("owner", document("Straße ﬁle", "Ｆｕｌｌｗｉｄｔｈ text café"))
    for q in ("STRASSE", "strasse", "FILE", "fullwidth", "ＣＡＦÉ", "Café", "cafe\u0301"):
        assert ids(await catalogue(api, q=q)) == [doc["id"]], q
    for q in ('"', "*", "' OR 1=1 --", "text OR nothing", "NEAR(text)", "te*", ".*", "%",
              "title:text"):
        r = await api.client.get("/api/catalogue", params={"q": q})
        assert r.status_code == 200, (q, r.text)
    assert (await catalogue(api, q="text OR nothing"))["total"] == 0
    assert (await catalogue(api, q="te*"))["total"] == 0  # "te" is not a word of the text
    assert ids(await catalogue(api, q="title:text")) == []  # words "title" and "text"
    # an empty or blank q is no query
    assert (await catalogue(api, q=""))["total"] == 1
    assert (await catalogue(api, q="   "))["total"] == 1
    # punctuation-only tokens hold no word: nothing matches
    assert (await catalogue(api, q="!!"))["total"] == 0


async def test_search_combines_with_filters_and_sorts(api: Api) -> None:
    names = await publish_example(api)
    claims = await catalogue(api, q="one two", kind="claim")
    assert ids(claims) == [names["merge"]]
    # the merged claim's assumptions, the evidence's content and the proposed claim body
    found = await catalogue(api, q="successor")
    assert ids(found) == [names["merge"], names["proposal"], names["evidence"]]  # ties: newest
    assert ids(await catalogue(api, q="successor", method="example")) == [names["evidence"]]
    peer = api.founding.participants["peer"].actor
    assert ids(await catalogue(api, q="successor", view="feed", author=peer)) == [
        names["proposal"], names["evidence"]]
    assert (await catalogue(api, q="successor", view="feed", kind="space"))["total"] == 0
    assert (await catalogue(api, q="calculation", verdict="supported"))["total"] == 1
    await api.publish("peer", vote(names["evidence"], "1"))
    top = await catalogue(api, q="successor", sort="top")
    assert ids(top) == [names["evidence"], names["merge"], names["proposal"]]
    summary = await catalogue(api, q="successor", projection="summary")
    assert [i["id"] for i in summary["items"]] == ids(found)


async def test_top_ranks_by_projected_votes_then_newest(api: Api) -> None:
    a = await api.publish("owner", document("A", "first"))
    b = await api.publish("owner", document("B", "second"))
    c = await api.publish("owner", document("C", "third"))
    assert ids(await catalogue(api, sort="top")) == [c["id"], b["id"], a["id"]]  # all 0
    await api.publish("owner", vote(a["id"], "1"))
    v = await api.publish("peer", vote(a["id"], "1"))
    await api.publish("peer", vote(c["id"], "-1"))
    assert ids(await catalogue(api, sort="top")) == [a["id"], b["id"], c["id"]]
    # a vote revision changes its value; a revision of the target keeps its score
    await api.publish("peer", vote(a["id"], "-1", previous=v["id"]))  # a: 1 - 1 = 0
    a2 = await api.publish("owner", document("A", "first, revised", previous=a["id"]))
    order = ids(await catalogue(api, sort="top"))
    assert order == [a2["id"], b["id"], c["id"]]  # a2 and b at 0: a2 is newer
    await api.publish("peer", vote(b["id"], "1"))
    assert ids(await catalogue(api, sort="top", kind="document")) == [b["id"], a2["id"], c["id"]]
    assert ids(await catalogue(api, sort="top", author=api.founding.participants[
        "owner"].actor)) == [b["id"], a2["id"], c["id"]]


async def test_paging_over_generated_data(api: Api) -> None:
    made = []
    for i in range(130):
        who = "owner" if i % 2 else "peer"
        made.append(await api.publish(who, document(f"Generated {i}", f"common text number {i}")))
    # revise some: they move to the front and the catalogue still holds one head per object
    for i in (3, 50, 99):
        who = "owner" if i % 2 else "peer"
        made[i] = await api.publish(who, document(f"Generated {i}", "revised common text",
                                                  previous=made[i]["id"]))
    expected = [m["id"] for m in sorted(made, key=lambda m: -m["admission"]["sequence"])]
    for params in ({}, {"kind": "document"}, {"view": "feed"}, {"projection": "summary"},
                   {"q": "common"}, {"q": "common text", "sort": "new"}, {"sort": "top"}):
        items = await walk(api, **params)
        assert [i["id"] for i in items] == expected, params
    owner = api.founding.participants["owner"].actor
    mine = await walk(api, author=owner)
    assert len(mine) == 65  # one head per object, revised or not
    assert [i["id"] for i in mine] == [x for x in expected if x in {i["id"] for i in mine}]
    page = await catalogue(api, offset="200")
    assert page["items"] == [] and page["total"] == 130 and page["next_offset"] is None
    page = await catalogue(api, q="common", offset="1000")
    assert page["items"] == [] and page["total"] == 130 and page["next_offset"] is None
    page = await catalogue(api, offset="129")
    assert len(page["items"]) == 1 and page["next_offset"] is None


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("sort=best", "BAD_PARAMETER"),
        ("kind=vote", "BAD_PARAMETER"),
        ("kind=Claim", "BAD_PARAMETER"),
        ("view=mine", "BAD_PARAMETER"),
        ("projection=compact", "BAD_PARAMETER"),
        ("method=guess", "BAD_PARAMETER"),
        ("verdict=maybe", "BAD_PARAMETER"),
        ("offset=-1", "BAD_PARAMETER"),
        ("offset=01", "BAD_PARAMETER"),
        ("offset=x", "BAD_PARAMETER"),
        ("offset=", "BAD_PARAMETER"),
        ("offset=99999999999999999", "BAD_PARAMETER"),
        ("author=ABC", "BAD_PARAMETER"),
        ("author=" + "A" * 64, "BAD_PARAMETER"),
        ("limit=5", "UNKNOWN_PARAMETER"),
        ("kind=claim&kind=space", "REPEATED_PARAMETER"),
        ("q=%FF", "BAD_PARAMETER"),
        ("q=caf%C3", "BAD_PARAMETER"),
        ("q=" + "a" * 501, "QUERY_TOO_LONG"),
        ("q=" + "+".join(f"w{i}" for i in range(17)), "QUERY_TOO_LONG"),
    ],
)
async def test_malformed_parameters_are_typed_400s(api: Api, query: str, code: str) -> None:
    r = await api.client.get(f"/api/catalogue?{query}")
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == code and body["error"]
    assert isinstance(body["details"], dict)


async def test_percent_encoded_utf8_queries_are_read_as_text(api: Api) -> None:
    for query in ("q=caf%C3%A9", "q=caf\u00e9", "q=%E2%80%94+x"):
        r = await api.client.get(f"/api/catalogue?{query}")
        assert r.status_code == 200, r.text


async def test_pages_are_json_with_exactly_the_contract_keys(api: Api) -> None:
    await publish_example(api)
    r = await api.client.get("/api/catalogue?kind=claim&q=information&sort=relevance&offset=0")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert set(json.loads(r.content)) == {"items", "library", "total", "next_offset"}
