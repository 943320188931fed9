"""Shared publishing helpers for the object-view tests (objects, connections, discussion)."""

from __future__ import annotations

from typing import Any

from alexandria.service.bootstrap import resolve_refs
from tests.support.library import CONTRACT, Api


async def publish_example(api: Api) -> dict[str, str]:
    """The contract's worked example, published in order: ``{step name: revision id}``."""
    names: dict[str, str] = {}
    for step in CONTRACT["object_examples"]["steps"]:
        signed = await api.publish(step["actor"], resolve_refs(step["content"], names))
        names[step["name"]] = signed["id"]
    return names


def space(title: str, parent: str = "", *, includes: tuple[str, ...] = ()) -> dict[str, Any]:
    links = [{"relation": "contained_in", "target": parent}] if parent else []
    links += [{"relation": "includes", "target": t} for t in includes]
    return {"kind": "space", "title": title, "body": {"summary": f"About {title}"},
            "links": links, "previous": ""}


def claim(title: str, parent: str = "", *, cites: tuple[str, ...] = ()) -> dict[str, Any]:
    links = [{"relation": "contained_in", "target": parent}] if parent else []
    links += [{"relation": "cites", "target": t} for t in cites]
    return {"kind": "claim", "title": title,
            "body": {"statement": f"{title} holds", "scope": "everywhere", "assumptions": []},
            "links": links, "previous": ""}


def document(title: str, parent: str = "", *, cites: tuple[str, ...] = ()) -> dict[str, Any]:
    links = [{"relation": "contained_in", "target": parent}] if parent else []
    links += [{"relation": "cites", "target": t} for t in cites]
    return {"kind": "document", "title": title, "body": {"text": f"Text of {title}"},
            "links": links, "previous": ""}


def discussion(title: str, *, parent: str = "", about: str = "", branches_from: str = "",
               cites: tuple[str, ...] = ()) -> dict[str, Any]:
    links = [{"relation": "contained_in", "target": parent}] if parent else []
    if about:
        links.append({"relation": "about", "target": about})
    if branches_from:
        links.append({"relation": "branches_from", "target": branches_from})
    links += [{"relation": "cites", "target": t} for t in cites]
    return {"kind": "discussion", "title": title, "body": {"text": f"Text of {title}"},
            "links": links, "previous": ""}


def reply(to: str, text: str, relation: str = "replies_to") -> dict[str, Any]:
    return {"kind": "reply", "title": f"Re: {text[:20]}", "body": text,
            "links": [{"relation": relation, "target": to}], "previous": ""}


def evidence(claim_rev: str, content: str, method: str = "example") -> dict[str, Any]:
    return {"kind": "evidence", "title": f"Evidence: {content[:20]}",
            "body": {"claim": claim_rev, "method": method, "content": content, "sources": []},
            "links": [{"relation": "evidence_for", "target": claim_rev}], "previous": ""}


def assessment(claim_rev: str, evidence_revs: list[str], verdict: str = "supported"
               ) -> dict[str, Any]:
    return {"kind": "assessment", "title": "Assessment",
            "body": {"claim": claim_rev, "verdict": verdict, "rationale": "Follows.",
                     "evidence": evidence_revs},
            "links": [{"relation": "assesses", "target": claim_rev}], "previous": ""}


def relationship(src: str, dst: str, relation: str = "supports") -> dict[str, Any]:
    return {"kind": "relationship", "title": "Relationship",
            "body": {"from": src, "to": dst, "relation": relation, "rationale": "Because."},
            "links": [{"relation": "relates_from", "target": src},
                      {"relation": "relates_to", "target": dst}], "previous": ""}


def vote(target_root: str, value: str = "1", previous: str = "") -> dict[str, Any]:
    return {"kind": "vote", "title": "Vote", "body": value,
            "links": [{"relation": "votes_on", "target": target_root}], "previous": previous}


def revise(content: dict[str, Any], previous: str, **changes: Any) -> dict[str, Any]:
    return {**content, **changes, "previous": previous}


def ids(records: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in records]


async def read_view(api: Api, path: str, keys: set[str], **params: str) -> dict[str, Any]:
    """``GET path`` through the real app: a 200 whose JSON object has exactly ``keys``."""
    r = await api.client.get(path, params=params)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert set(out) == keys
    return out


async def refused_parameter(api: Api, path: str, query: str, code: str) -> dict[str, Any]:
    """``GET path?query`` is a 400 with ``code``; the error body."""
    r = await api.client.get(f"{path}?{query}")
    assert r.status_code == 400, r.text
    body: dict[str, Any] = r.json()
    assert body["code"] == code, body
    return body
