"""Publishing helpers for the catalogue, scores and search-index tests."""

from __future__ import annotations

from typing import Any

from tests.support.library import Api
from tests.support.objects import publish_example

__all__ = ["publish_example"]  # the catalogue tests' import of the worked example


def content(kind: str, title: str, body: Any, links: list[tuple[str, str]] | None = None,
            previous: str = "") -> dict[str, Any]:
    return {"kind": kind, "title": title, "body": body,
            "links": [{"relation": r, "target": t} for r, t in links or []],
            "previous": previous}


def document(title: str, text: str, previous: str = "") -> dict[str, Any]:
    return content("document", title, {"text": text}, previous=previous)


def vote(target: str, value: str, previous: str = "") -> dict[str, Any]:
    return content("vote", "vote", value, [("votes_on", target)], previous)


async def catalogue(api: Api, **params: str) -> dict[str, Any]:
    r = await api.client.get("/api/catalogue", params=params)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def walk(api: Api, **params: str) -> list[dict[str, Any]]:
    """Every item of a catalogue view, following ``next_offset``; checks page invariants."""
    items: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = await catalogue(api, **params, offset=str(offset))
        assert len(page["items"]) <= 50
        items.extend(page["items"])
        if page["next_offset"] is None:
            assert len(items) == page["total"]
            return items
        assert len(page["items"]) == 50
        assert page["next_offset"] == offset + 50
        offset = page["next_offset"]
