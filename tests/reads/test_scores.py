"""``GET /api/scores?author=`` through the real app."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.catalogue import document, publish_example, vote
from tests.support.library import Api


async def scores(api: Api, author: str, **params: str) -> dict[str, Any]:
    r = await api.client.get("/api/scores", params={"author": author, **params})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def test_received_totals_and_current_votes(api: Api) -> None:
    names = await publish_example(api)
    owner = api.founding.participants["owner"].actor
    peer = api.founding.participants["peer"].actor
    empty = await scores(api, peer)
    assert empty == {"author": peer, "received": {"score": 0, "up": 0, "down": 0, "neutral": 0},
                     "votes": [], "votes_total": 0, "next_offset": None}
    v1 = await api.publish("peer", vote(names["claim"], "1"))
    v2 = await api.publish("peer", vote(names["document"], "-1"))
    await api.publish("owner", vote(names["claim"], "1"))
    got = await scores(api, owner)
    assert got["received"] == {"score": 1, "up": 2, "down": 1, "neutral": 0}
    assert got["votes_total"] == 1
    assert got["votes"][0]["target"] == names["claim"] and got["votes"][0]["target_score"] == 2
    mine = await scores(api, peer)
    assert mine["received"] == {"score": 0, "up": 0, "down": 0, "neutral": 0}
    assert mine["votes_total"] == 2
    assert mine["votes"] == [
        {"target": names["document"], "value": -1, "vote": v2["id"], "vote_root": v2["id"],
         "target_score": -1},
        {"target": names["claim"], "value": 1, "vote": v1["id"], "vote_root": v1["id"],
         "target_score": 2},
    ]
    # revising a vote changes its value and moves it to the front; the count stays
    v1b = await api.publish("peer", vote(names["claim"], "0", previous=v1["id"]))
    mine = await scores(api, peer)
    assert mine["votes_total"] == 2
    assert mine["votes"][0] == {"target": names["claim"], "value": 0, "vote": v1b["id"],
                                "vote_root": v1["id"], "target_score": 1}
    got = await scores(api, owner)
    assert got["received"] == {"score": 0, "up": 1, "down": 1, "neutral": 1}


async def test_votes_page(api: Api) -> None:
    targets = [(await api.publish("owner", document(f"T{i}", "text")))["id"] for i in range(120)]
    cast = [(await api.publish("peer", vote(t, "1")))["id"] for t in targets]
    peer = api.founding.participants["peer"].actor
    seen: list[str] = []
    offset = 0
    while True:
        page = await scores(api, peer, offset=str(offset))
        assert page["votes_total"] == 120
        seen += [v["vote"] for v in page["votes"]]
        if page["next_offset"] is None:
            break
        assert len(page["votes"]) == 50
        offset = page["next_offset"]
    assert seen == cast[::-1]
    owner = api.founding.participants["owner"].actor
    assert (await scores(api, owner))["received"] == {
        "score": 120, "up": 120, "down": 0, "neutral": 0}


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("", "MISSING_PARAMETER"),
        ("author=xyz", "BAD_PARAMETER"),
        ("author=" + "A" * 64, "BAD_PARAMETER"),
        ("author=" + "a" * 64 + "&offset=-3", "BAD_PARAMETER"),
        ("author=" + "a" * 64 + "&sort=top", "UNKNOWN_PARAMETER"),
        ("author=" + "a" * 64 + "&author=" + "b" * 64, "REPEATED_PARAMETER"),
    ],
)
async def test_malformed_parameters(api: Api, query: str, code: str) -> None:
    r = await api.client.get(f"/api/scores?{query}")
    assert r.status_code == 400
    assert r.json()["code"] == code
