"""Helpers shared by the admission tests: content builders for every kind, and assertions that
check a verdict the way a client sees it — status, error ``code``, the error body's shape, the
same verdict under ``?dry_run=true``, and that a refusal stored nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from alexandria.core.canonical import canonical
from alexandria.core.records import revision_id
from alexandria.errors import AlexandriaError
from alexandria.service.bootstrap import Founding
from tests.support.library import Api, Clock, serve_library

# --- content builders ------------------------------------------------------------------------


def link(relation: str, target: str) -> dict[str, str]:
    return {"relation": relation, "target": target}


def space(title: str = "Space", parent: str | None = None, *extra: dict[str, str],
          summary: str = "A space") -> dict[str, Any]:
    links = [link("contained_in", parent)] if parent else []
    return {"kind": "space", "title": title, "body": {"summary": summary},
            "links": [*links, *extra], "previous": ""}


def claim(parent: str | None = None, *extra: dict[str, str], title: str = "Claim",
          statement: str = "One plus one equals two") -> dict[str, Any]:
    links = [link("contained_in", parent)] if parent else []
    return {"kind": "claim", "title": title,
            "body": {"statement": statement, "scope": "Naturals", "assumptions": []},
            "links": [*links, *extra], "previous": ""}


def document(parent: str | None = None, *extra: dict[str, str]) -> dict[str, Any]:
    links = [link("contained_in", parent)] if parent else []
    return {"kind": "document", "title": "Document", "body": {"text": "A synthesis."},
            "links": [*links, *extra], "previous": ""}


def discussion(*links: dict[str, str], title: str = "Discussion") -> dict[str, Any]:
    return {"kind": "discussion", "title": title, "body": {"text": "Does it hold?"},
            "links": list(links), "previous": ""}


def reply(*links: dict[str, str], text: str = "It does.") -> dict[str, Any]:
    return {"kind": "reply", "title": "Reply", "body": text, "links": list(links), "previous": ""}


def evidence(claim_id: str, *, sources: list[dict[str, Any]] | None = None,
             links: list[dict[str, str]] | None = None, **body: Any) -> dict[str, Any]:
    return {"kind": "evidence", "title": "Evidence",
            "body": {"claim": claim_id, "method": "example", "content": "1 + 1 = 2",
                     "sources": sources or [], **body},
            "links": [link("evidence_for", claim_id)] if links is None else links,
            "previous": ""}


def assessment(claim_id: str, evidence_ids: list[str], verdict: str = "supported",
               links: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"kind": "assessment", "title": "Assessment",
            "body": {"claim": claim_id, "verdict": verdict, "rationale": "It follows.",
                     "evidence": evidence_ids},
            "links": [link("assesses", claim_id)] if links is None else links,
            "previous": ""}


def relationship(frm: str, to: str, links: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"kind": "relationship", "title": "Relationship",
            "body": {"from": frm, "to": to, "relation": "supports", "rationale": "Because."},
            "links": ([link("relates_from", frm), link("relates_to", to)]
                      if links is None else links),
            "previous": ""}


def proposal(base: str, title: str, body: dict[str, Any], links: list[dict[str, str]],
             proposes_for: str | None = None) -> dict[str, Any]:
    return {"kind": "proposal", "title": "Proposal",
            "body": {"base": base, "title": title, "body": body, "links": links,
                     "rationale": "Name the axioms."},
            "links": [link("proposes_for", proposes_for or base)], "previous": ""}


def vote(target: str, value: str = "1", *extra: dict[str, str]) -> dict[str, Any]:
    return {"kind": "vote", "title": "Vote", "body": value,
            "links": [link("votes_on", target), *extra], "previous": ""}


def revise(content: dict[str, Any], previous: str, **changes: Any) -> dict[str, Any]:
    return {**content, **changes, "previous": previous}


# --- assertions --------------------------------------------------------------------------------


def _record_id(envelope: Any) -> str | None:
    """The revision id a refused envelope would have had, when its record has one."""
    try:
        return revision_id(envelope["record"])
    except (AlexandriaError, KeyError, TypeError):
        return None


def check_error_body(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, (status, code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = r.json()
    assert set(body) == {"error", "code", "details"}, body
    assert body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["details"], dict)
    return body


async def refused(api: Api, envelope: Any, status: int, code: str,
                  dry_run: bool = True) -> dict[str, Any]:
    """Post ``envelope`` (a dict, or raw bytes): expect ``status``/``code`` both as a dry run
    and for real, and nothing stored.  Returns the error body."""
    size = await api.library.storage.log_size()
    rid = _record_id(envelope) if isinstance(envelope, dict) else None
    before = None if rid is None else await api.client.get(f"/api/entries/{rid}")
    if dry_run:
        check_error_body(await api.post(envelope, dry_run="true"), status, code)
    body = check_error_body(await api.post(envelope), status, code)
    assert await api.library.storage.log_size() == size, "a refusal stored something"
    if rid is not None and before is not None:
        got = await api.client.get(f"/api/entries/{rid}")
        if before.status_code == 200:  # a refused retry of an admitted record changes nothing
            assert got.status_code == 200 and got.content == before.content
        else:
            assert got.status_code == 404 and got.json()["code"] == "UNKNOWN_REVISION", got.text
    return body


async def admitted(api: Api, envelope: dict[str, Any], dry_run: bool = True) -> dict[str, Any]:
    """Expect a dry run to answer the id and root without storing, then a 201."""
    size = await api.library.storage.log_size()
    rid = revision_id(envelope["record"])
    if dry_run:
        r = await api.post(envelope, dry_run="true")
        assert r.status_code == 200, r.text
        dry = r.json()
        assert dry == {"dry_run": True, "id": rid, "root": dry["root"], "already_admitted": False}
        assert await api.library.storage.log_size() == size
        assert (await api.client.get(f"/api/entries/{rid}")).status_code == 404
    r = await api.post(envelope)
    assert r.status_code == 201, r.text
    signed: dict[str, Any] = r.json()
    assert signed["id"] == rid
    assert r.content == canonical(signed), "a signed record is served in canonical form"
    if dry_run:
        assert signed["root"] == dry["root"]
    assert await api.library.storage.log_size() == size + 1
    return signed


async def accept(api: Api, who: str, content: dict[str, Any], dry_run: bool = False) -> str:
    """Publish ``content`` as ``who`` and return its revision id."""
    return str((await admitted(api, api.envelope(who, content), dry_run))["id"])


async def reject(api: Api, who: str, content: dict[str, Any], status: int, code: str,
                 authored_at: str | None = None) -> dict[str, Any]:
    return await refused(api, api.envelope(who, content, authored_at), status, code)


def raw(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope).encode()


# --- a library over the real app ---------------------------------------------------------------


async def serve(tmp_path: Path, founding: Founding, clock: Clock,
                documents: list[dict[str, Any]] | None = None) -> AsyncIterator[Api]:
    """Like the ``api`` fixture, for a library of any founding (e.g. a 2-of-3 genesis)."""
    async for api in serve_library(tmp_path, founding, clock, documents):
        yield api
