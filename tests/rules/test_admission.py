"""Admission as a whole (PROTOCOL §4): the scopes table, the order of the checks across the
stateless and stateful stages, ``?dry_run=true``, and exact retries.  The individual checks are
in test_records.py (shape), test_trust.py (certificates) and test_state_rules.py (state rules)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from alexandria.core.canonical import canonical
from alexandria.core.records import make_envelope, make_record
from alexandria.rules.authority import SCOPE_OF_KIND
from alexandria.service.bootstrap import ALL_SCOPES
from tests.support.admission import (
    accept,
    admitted,
    assessment,
    check_error_body,
    claim,
    discussion,
    document,
    evidence,
    link,
    proposal,
    refused,
    relationship,
    reply,
    revise,
    space,
    vote,
)
from tests.support.library import CONTRACT, Api

SCOPES: dict[str, list[str]] = CONTRACT["write_contract"]["scopes"]


def test_the_scopes_table_is_the_contracts() -> None:
    expected = {kind: scope for scope, kinds in SCOPES.items() for kind in kinds}
    public = {k: v for k, v in SCOPE_OF_KIND.items() if not k.startswith("personal-")}
    assert public == expected
    assert sorted(SCOPES) == ALL_SCOPES


async def _world(api: Api) -> dict[str, dict[str, Any]]:
    """One valid content of every kind, given a small library."""
    s = await accept(api, "owner", space())
    c = await accept(api, "owner", claim(s))
    doc = await accept(api, "owner", document(s))
    d = await accept(api, "owner", discussion(link("about", c)))
    e = await accept(api, "owner", evidence(c))
    return {
        "space": space("Sub", s), "discussion": discussion(link("about", c)), "claim": claim(s),
        "document": document(s), "evidence": evidence(c), "assessment": assessment(c, [e]),
        "relationship": relationship(c, doc),
        "proposal": proposal(c, "T", {"statement": "s", "scope": "t", "assumptions": []},
                             [link("contained_in", s)]),
        "reply": reply(link("replies_to", d)), "vote": vote(c),
    }


@pytest.mark.parametrize(("scope", "kind"),
                         [(scope, kind) for scope, kinds in SCOPES.items() for kind in kinds])
async def test_each_scope_grants_exactly_its_kinds(api: Api, scope: str, kind: str) -> None:
    world = await _world(api)
    f = api.founding
    without = f.enroll("without", scopes=[s for s in ALL_SCOPES if s != scope])
    only = f.enroll("only", scopes=[scope])
    body = await refused(api, without.envelope(f.genesis, world[kind], api.clock.tick()), 403,
                         "SCOPE_DENIED")
    assert body["details"]["required"] == scope
    assert scope not in body["details"]["granted"]
    await admitted(api, only.envelope(f.genesis, world[kind], api.clock.tick()))
    for other, content in world.items():
        if SCOPE_OF_KIND[other] != scope:
            await refused(api, only.envelope(f.genesis, content, api.clock.tick()), 403,
                          "SCOPE_DENIED")


# --- the order of the checks -------------------------------------------------------------------


def _with_proof(env: dict[str, Any], proof: str) -> dict[str, Any]:
    out = copy.deepcopy(env)
    out["signature"]["proof"] = proof
    return out


async def test_checks_run_in_protocol_order(api: Api) -> None:
    f = api.founding
    c = await accept(api, "owner", claim())
    bad_schema = {**space(), "title": ""}
    bad_proof = "00" * 64
    # authority chain before proof
    stray = make_record(f.genesis.pin, f.participants["peer"].actor, api.clock.tick(), space())
    env = make_envelope(stray, f.participants["owner"].certificate,
                        f.participants["owner"].worker)
    await refused(api, _with_proof(env, bad_proof), 403, "AUTHOR_NOT_CERTIFIED")
    # proof before scope and schema
    voter = f.enroll("voter", scopes=["library.vote"])
    env = voter.envelope(f.genesis, bad_schema, api.clock.tick())
    await refused(api, _with_proof(env, bad_proof), 403, "PROOF_INVALID")
    # scope before schema
    await refused(api, env, 403, "SCOPE_DENIED")
    # schema before state rules
    await refused(api, api.envelope("owner", {**bad_schema, "links": [link("cites", "f" * 64)]}),
                  422, "SCHEMA_VIOLATION")
    # state rules (even a conflict) after proof
    first = api.envelope("peer", vote(c))
    await admitted(api, first)
    await refused(api, _with_proof(api.envelope("peer", vote(c, "0")), bad_proof), 403,
                  "PROOF_INVALID")
    # an expired certificate before everything that follows it
    old = f.enroll("old", not_after="2026-02-01T00:00:00.000Z")
    env = old.envelope(f.genesis, bad_schema, "2026-01-15T00:00:00.000Z")
    await refused(api, _with_proof(env, bad_proof), 403, "CERTIFICATE_EXPIRED")


async def test_an_exact_retry_still_needs_a_valid_proof(api: Api) -> None:
    env = api.envelope("owner", space())
    signed = await admitted(api, env)
    await refused(api, _with_proof(env, "00" * 64), 403, "PROOF_INVALID")
    r = await api.post(env)
    assert r.status_code == 200 and r.json() == signed


# --- exact retries -----------------------------------------------------------------------------


async def test_exact_retries_answer_the_stored_record_whatever_the_json_spelling(api: Api) -> None:
    env = api.envelope("owner", claim())
    first = await api.post(env)
    assert first.status_code == 201
    size = await api.library.storage.log_size()
    spellings = [
        json.dumps(env).encode(),
        canonical(env),
        json.dumps(env, indent=3, ensure_ascii=False).encode(),
        json.dumps(dict(reversed(list(env.items())))).encode(),
    ]
    for data in spellings:
        r = await api.post(data)
        assert r.status_code == 200, r.text
        assert r.content == first.content
        assert r.headers["location"] == f"/api/entries/{first.json()['id']}"
    assert await api.library.storage.log_size() == size


# --- ?dry_run=true -----------------------------------------------------------------------------


async def test_dry_run_answers_id_and_root_and_stores_nothing(api: Api) -> None:
    first = claim()
    env = api.envelope("owner", first)
    signed = await admitted(api, env)  # dry run (200, nothing stored), then 201
    assert signed["root"] == signed["id"]
    again = await api.post(env, dry_run="true")
    assert again.status_code == 200
    assert again.json() == {"dry_run": True, "id": signed["id"], "root": signed["id"],
                            "already_admitted": True}
    rev = api.envelope("owner", revise(first, signed["id"], title="Revised"))
    size = await api.library.storage.log_size()
    dry = await api.post(rev, dry_run="true")
    assert dry.status_code == 200
    assert dry.json()["root"] == signed["id"] and dry.json()["already_admitted"] is False
    assert await api.library.storage.log_size() == size
    head = await api.client.get(f"/api/entries/{signed['id']}/head")
    assert head.json()["id"] == signed["id"]
    explicit = await api.post(rev, dry_run="false")
    assert explicit.status_code == 201 and explicit.json()["root"] == signed["id"]


async def test_dry_run_reserves_nothing(api: Api) -> None:
    first = claim()
    c = await accept(api, "owner", first)
    a = api.envelope("owner", revise(first, c, title="A"))
    b = api.envelope("owner", revise(first, c, title="B"))
    for env in (a, b):
        assert (await api.post(env, dry_run="true")).status_code == 200
    assert (await api.post(a)).status_code == 201
    body = check_error_body(await api.post(b, dry_run="true"), 409, "HEAD_CONFLICT")
    assert body["details"]["head"] == (await api.post(a)).json()["id"]


async def test_dry_run_refuses_with_the_same_verdicts(api: Api) -> None:
    # ``refused`` posts every refusal twice, as a dry run and for real: a sample of each status
    c = await accept(api, "owner", claim())
    await accept(api, "peer", vote(c))
    await refused(api, b"{", 400, "NOT_JSON")
    await refused(api, b" " * 65_537, 413, "BODY_TOO_LARGE")
    await refused(api, api.envelope("peer", vote(c, "-1")), 409, "DUPLICATE_VOTE")
    await refused(api, _with_proof(api.envelope("owner", space()), "00" * 64), 403,
                  "PROOF_INVALID")
    await refused(api, api.envelope("owner", space("S", "f" * 64)), 422, "LINK_TARGET_MISSING")


@pytest.mark.parametrize("query", ["dry_run=yes", "dry_run=", "dry_run=true&dry_run=true",
                                   "dryrun=true"])
async def test_bad_query_parameters_are_400(api: Api, query: str) -> None:
    env = api.envelope("owner", space())
    size = await api.library.storage.log_size()
    r = await api.client.post(f"/api/entries?{query}", content=canonical(env))
    assert r.status_code == 400
    assert r.json()["code"] in {"BAD_PARAMETER", "REPEATED_PARAMETER", "UNKNOWN_PARAMETER"}
    assert await api.library.storage.log_size() == size


async def test_reads_of_unknown_or_malformed_revisions(api: Api) -> None:
    for path in ("/api/entries/" + "a" * 64, "/api/entries/" + "a" * 64 + "/head"):
        check_error_body(await api.client.get(path), 404, "UNKNOWN_REVISION")
    for path in ("/api/entries/" + "A" * 64, "/api/entries/abc", "/api/entries/" + "a" * 65,
                 "/api/entries/" + "a" * 64 + "%0A", "/api/entries/" + "a" * 64 + "%0A/head"):
        check_error_body(await api.client.get(path), 400, "BAD_REVISION")
