"""``POST /api/personal`` through the real HTTP app: every rule of the contract's personal_lists
(docs/personal.md)."""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.api.app import create_app
from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.records import make_envelope, make_record
from alexandria.core.timestamps import format_ms
from alexandria.core.trust import make_revocation
from alexandria.rules.personal import MAX_ROOTS, WINDOW_MS
from alexandria.service.bootstrap import resolve_refs
from alexandria.service.library import Library
from alexandria.store.backends import storage_for
from alexandria.store.personal import RETENTION_MS
from tests.support.library import CONTRACT, Api

PUBLIC_TABLES = ("log", "merkle_nodes", "revisions", "objects", "links", "feed", "votes")


def nonce() -> str:
    return secrets.token_hex(32)


def record(api: Api, who: str, kind: str, body: Any, previous: str = "",
           authored_at: str | None = None, title: str = "",
           links: list[dict[str, str]] | None = None) -> dict[str, Any]:
    p = api.founding.participants[who]
    content = {"kind": kind, "title": title, "body": body, "links": links or [],
               "previous": previous}
    return make_record(api.founding.genesis.pin, p.actor, authored_at or api.clock.now(), content)


def seal(api: Api, who: str, rec: dict[str, Any]) -> dict[str, Any]:
    p = api.founding.participants[who]
    return make_envelope(rec, p.certificate, p.worker)


def read_env(api: Api, who: str, n: str | None = None, **kw: Any) -> dict[str, Any]:
    return seal(api, who, record(api, who, "personal-read", {"nonce": n or nonce()}, **kw))


def state_env(api: Api, who: str, following: list[str], saved: list[str], previous: str = "",
              **kw: Any) -> dict[str, Any]:
    body = {"following": following, "saved": saved}
    return seal(api, who, record(api, who, "personal-state", body, previous, **kw))


async def send(api: Api, env: Any, client: httpx.AsyncClient | None = None) -> httpx.Response:
    data = env if isinstance(env, bytes) else json.dumps(env).encode()
    return await (client or api.client).post("/api/personal", content=data)


async def read(api: Api, who: str) -> Any:
    r = await send(api, read_env(api, who))
    assert r.status_code == 200, r.text
    return r.json()["state"]


def refused(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    out: dict[str, Any] = r.json()
    assert out["code"] == code, out
    if r.request.url.path == "/api/personal":
        # a refusal may carry the signer's lists (409): no shared cache may keep any of them
        assert r.headers["cache-control"] == "no-store"
    return out


async def public_counts(api: Api) -> dict[str, int]:
    def fn(conn: sqlite3.Connection) -> dict[str, int]:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in PUBLIC_TABLES}

    return await api.library.storage.read(fn)


@pytest.fixture
async def ids(api: Api) -> dict[str, str]:
    """The contract's worked example, plus a vote: one root of every public kind."""
    names: dict[str, str] = {}
    for step in CONTRACT["object_examples"]["steps"]:
        signed = await api.publish(step["actor"], resolve_refs(step["content"], names))
        names[step["name"]] = signed["id"]
    votes_on = [{"relation": "votes_on", "target": names["claim"]}]
    vote = await api.publish("peer", {"kind": "vote", "title": "Vote", "body": "1",
                                      "links": votes_on})
    names["vote"] = vote["id"]
    api.clock.tick()
    return names


# --- read, write, read -----------------------------------------------------------------------


async def test_read_is_null_before_any_write_and_the_signed_state_after(
    api: Api, ids: dict[str, str]
) -> None:
    r = await send(api, read_env(api, "owner"))
    assert r.status_code == 200, r.text
    assert r.content == b'{"state":null}'
    assert r.headers["cache-control"] == "no-store"

    env = state_env(api, "owner", [ids["claim"], ids["space"]], [ids["document"], ids["claim"]])
    w = await send(api, env)
    assert w.status_code == 201, w.text
    state = w.json()["state"]
    assert set(state) == {"id", "record", "signature"}
    assert state["record"] == env["record"] and state["signature"] == env["signature"]
    assert state["id"] == sha256_hex(canonical(env["record"]))
    assert w.content == b'{"state":' + canonical(state) + b"}"  # canonical, served as stored

    api.clock.tick()
    again = await send(api, read_env(api, "owner"))
    assert again.status_code == 200 and again.content == w.content
    body = json.loads(again.json()["state"]["record"]["body"])
    assert body == {"following": [ids["claim"], ids["space"]],
                    "saved": [ids["document"], ids["claim"]]}  # the client's order is kept


async def test_empty_lists_are_a_state(api: Api) -> None:
    w = await send(api, state_env(api, "owner", [], []))
    assert w.status_code == 201, w.text
    assert (await read(api, "owner"))["id"] == w.json()["state"]["id"]


# --- compare-and-set -------------------------------------------------------------------------


async def test_stale_previous_is_409_with_the_current_state(api: Api, ids: dict[str, str]) -> None:
    first = (await send(api, state_env(api, "owner", [ids["claim"]], []))).json()["state"]
    api.clock.tick()
    r = await send(api, state_env(api, "owner", [ids["space"]], []))  # previous "" is stale now
    out = refused(r, 409, "PERSONAL_STATE_CONFLICT")
    assert out["details"] == {"head": first["id"], "state": first}

    api.clock.tick()
    second = await send(api, state_env(api, "owner", [ids["claim"], ids["space"]], [],
                                       previous=first["id"]))
    assert second.status_code == 201, second.text
    api.clock.tick()
    lost = await send(api, state_env(api, "owner", [], [ids["document"]], previous=first["id"]))
    out = refused(lost, 409, "PERSONAL_STATE_CONFLICT")
    assert out["details"]["state"] == second.json()["state"]
    assert (await read(api, "owner")) == second.json()["state"]


async def test_previous_naming_a_state_when_there_is_none_is_409_with_null(api: Api) -> None:
    r = await send(api, state_env(api, "owner", [], [], previous="ab" * 32))
    out = refused(r, 409, "PERSONAL_STATE_CONFLICT")
    assert out["details"] == {"head": "", "state": None}


async def test_of_two_concurrent_writes_on_one_previous_exactly_one_wins(
    api: Api, ids: dict[str, str]
) -> None:
    envs = [state_env(api, "owner", [ids["claim"]], []),
            state_env(api, "owner", [ids["space"]], [])]
    results = await asyncio.gather(*(send(api, e) for e in envs))
    assert sorted(r.status_code for r in results) == [201, 409]
    winner = next(r for r in results if r.status_code == 201).json()["state"]
    loser = next(r for r in results if r.status_code == 409).json()
    assert loser["details"]["state"] == winner
    assert (await read(api, "owner")) == winner


# --- limits ----------------------------------------------------------------------------------


async def test_at_most_128_unique_roots_per_list(api: Api) -> None:
    roots = []
    for i in range(MAX_ROOTS):
        signed = await api.publish("owner", {"kind": "space", "title": f"Space {i}",
                                             "body": {"summary": "s"}, "links": [],
                                             "previous": ""})
        roots.append(signed["id"])
    api.clock.tick()
    too_many = [*roots, "00" * 32]
    for following, saved in ((too_many, []), ([], too_many)):
        r = await send(api, state_env(api, "owner", following, saved))
        out = refused(r, 422, "PERSONAL_LIST_TOO_LONG")
        assert out["details"]["limit"] == MAX_ROOTS and out["details"]["actual"] == MAX_ROOTS + 1
    dup = await send(api, state_env(api, "owner", [roots[0], roots[1], roots[0]], []))
    out = refused(dup, 422, "PERSONAL_DUPLICATE")
    assert out["details"]["pointer"] == "/body/following/2"
    dup = await send(api, state_env(api, "owner", [], [roots[3], roots[3]]))
    assert refused(dup, 422, "PERSONAL_DUPLICATE")["details"]["pointer"] == "/body/saved/1"
    assert await read(api, "owner") is None

    full = await send(api, state_env(api, "owner", roots, list(reversed(roots))))
    assert full.status_code == 201, full.text


async def test_only_space_discussion_claim_and_document_roots(
    api: Api, ids: dict[str, str]
) -> None:
    head = ""
    for name in ("space", "subspace", "claim", "discussion", "branch", "document"):
        r = await send(api, state_env(api, "peer", [ids[name]], [ids[name]], previous=head))
        assert r.status_code == 201, (name, r.text)
        head = r.json()["state"]["id"]
        api.clock.tick()
    before = await read(api, "owner")
    assert before is None
    for name in ("evidence", "assessment", "relationship", "proposal", "reply", "vote"):
        for following, saved, where in (([ids[name]], [], "/body/following/0"),
                                        ([ids["claim"]], [ids[name]], "/body/saved/0")):
            r = await send(api, state_env(api, "owner", following, saved))
            out = refused(r, 422, "PERSONAL_TARGET_KIND")
            assert out["details"]["pointer"] == where
            assert out["details"]["actual"] == name
    merge = await send(api, state_env(api, "owner", [ids["merge"]], []))
    out = refused(merge, 422, "PERSONAL_NOT_ROOT")
    assert out["details"]["root"] == ids["claim"]
    missing = await send(api, state_env(api, "owner", [], ["12" * 32]))
    refused(missing, 422, "PERSONAL_TARGET_MISSING")
    assert await read(api, "owner") is None


async def test_record_shape_of_personal_kinds(api: Api, ids: dict[str, str]) -> None:
    cases = [
        (record(api, "owner", "personal-read", {"nonce": nonce()},
                links=[{"relation": "cites", "target": ids["claim"]}]), "/record/links"),
        (record(api, "owner", "personal-read", {"nonce": nonce()}, previous=ids["claim"]),
         "/record/previous"),
        (record(api, "owner", "personal-read", {"nonce": nonce().upper()}), "/body/nonce"),
        (record(api, "owner", "personal-read", {"nonce": nonce(), "x": 1}), "/body"),
        (record(api, "owner", "personal-state", {"following": []}), "/body"),
        (record(api, "owner", "personal-state", {"following": "x", "saved": []}),
         "/body/following"),
        (record(api, "owner", "personal-state", {"following": [], "saved": [1]}),
         "/body/saved/0"),
    ]
    for rec, where in cases:
        out = refused(await send(api, seal(api, "owner", rec)), 422, "PERSONAL_SHAPE")
        assert out["details"]["pointer"] == where, (rec, out)
    # the contract names no title for personal records: any string is accepted, and kept
    titled = record(api, "owner", "personal-state", {"following": [ids["claim"]], "saved": []},
                    title="My lists")
    answer = await send(api, seal(api, "owner", titled))
    assert answer.status_code == 201, answer.text
    assert answer.json()["state"]["record"]["title"] == "My lists"
    reading = record(api, "owner", "personal-read", {"nonce": nonce()}, title="Read")
    assert (await send(api, seal(api, "owner", reading))).status_code == 200
    rec = record(api, "owner", "personal-read", {"nonce": nonce()})
    rec["body"] = json.dumps({"nonce": nonce()})  # '{"nonce": "…"}' with a space
    refused(await send(api, seal(api, "owner", rec)), 422, "NON_CANONICAL_BODY")


# --- time window -----------------------------------------------------------------------------


async def test_requests_outside_five_minutes_or_over_60s_ahead_are_refused(api: Api) -> None:
    now = api.clock.ms
    for kind in ("personal-read", "personal-state"):

        def at(ms: int, kind: str = kind) -> dict[str, Any]:
            if kind == "personal-read":
                return read_env(api, "owner", authored_at=format_ms(ms))
            return state_env(api, "peer", [], [], authored_at=format_ms(ms))

        out = refused(await send(api, at(now - WINDOW_MS - 1)), 422, "TIMESTAMP_TOO_OLD")
        assert out["details"]["server_time"] == api.clock.now()
        refused(await send(api, at(now + 60_001)), 422, "TIMESTAMP_IN_FUTURE")
    assert (await send(api, read_env(api, "owner", authored_at=format_ms(now - WINDOW_MS)))
            ).status_code == 200
    assert (await send(api, read_env(api, "owner", authored_at=format_ms(now + 60_000)))
            ).status_code == 200
    edge = await send(api, state_env(api, "peer", [], [], authored_at=format_ms(now + 60_000)))
    assert edge.status_code == 201, edge.text


async def test_a_request_signed_then_delayed_past_the_window_is_refused(api: Api) -> None:
    env = state_env(api, "owner", [], [])
    api.clock.tick(WINDOW_MS + 1)
    refused(await send(api, env), 422, "TIMESTAMP_TOO_OLD")
    assert await read(api, "owner") is None


async def test_authored_at_outside_the_certificate_window_is_refused(api: Api) -> None:
    p = api.founding.enroll("late", not_before=format_ms(api.clock.ms - 1000))
    assert p.certificate["certificate"]["not_before"] == format_ms(api.clock.ms - 1000)
    r = await send(api, read_env(api, "late", authored_at=format_ms(api.clock.ms - 2000)))
    refused(r, 422, "TIMESTAMP_OUTSIDE_CERTIFICATE")
    assert (await send(api, read_env(api, "late"))).status_code == 200


# --- authorization ---------------------------------------------------------------------------


async def test_library_publish_is_required(api: Api) -> None:
    api.founding.enroll("voter", scopes=["library.vote"])
    for env in (read_env(api, "voter"), state_env(api, "voter", [], [])):
        out = refused(await send(api, env), 403, "SCOPE_DENIED")
        assert out["details"]["required"] == "library.publish"
    api.founding.enroll("publisher", scopes=["library.publish"])
    assert (await send(api, read_env(api, "publisher"))).status_code == 200
    assert (await send(api, state_env(api, "publisher", [], []))).status_code == 201


async def test_a_forged_proof_is_refused(api: Api) -> None:
    env = read_env(api, "owner")
    env["signature"]["proof"] = seal(api, "peer", env["record"])["signature"]["proof"]
    refused(await send(api, env), 403, "PROOF_INVALID")


# --- idempotent retries and nonces -----------------------------------------------------------


async def test_exact_signed_retries_are_idempotent(api: Api, ids: dict[str, str]) -> None:
    env = state_env(api, "owner", [ids["claim"]], [])
    first = await send(api, env)
    assert first.status_code == 201, first.text
    retry = await send(api, env)
    assert retry.status_code == 200 and retry.content == first.content

    reading = read_env(api, "owner")
    r1, r2 = await send(api, reading), await send(api, reading)
    assert r1.status_code == r2.status_code == 200 and r1.content == r2.content == first.content

    api.clock.tick()
    second = await send(api, state_env(api, "owner", [], [], previous=first.json()["state"]["id"]))
    assert second.status_code == 201
    late = await send(api, env)  # a retry of a superseded write changes nothing
    assert late.status_code == 200 and late.content == second.content
    assert (await read(api, "owner")) == second.json()["state"]


async def test_retries_stop_when_the_authorization_is_revoked(api: Api) -> None:
    env = state_env(api, "owner", [], [])
    assert (await send(api, env)).status_code == 201
    worker = api.founding.participants["owner"].worker.public_hex
    doc = make_revocation(api.founding.genesis, worker, "key lost", [api.founding.authority])
    assert (await api.client.post("/api/authority", json=doc)).status_code == 201
    refused(await send(api, env), 403, "WORKER_REVOKED")
    refused(await send(api, read_env(api, "owner")), 403, "WORKER_REVOKED")


async def test_retries_stop_when_the_window_has_passed(api: Api) -> None:
    env = state_env(api, "owner", [], [])
    assert (await send(api, env)).status_code == 201
    api.clock.tick(WINDOW_MS)
    assert (await send(api, env)).status_code == 200
    api.clock.tick(1)
    refused(await send(api, env), 422, "TIMESTAMP_TOO_OLD")


async def test_a_reused_nonce_with_another_record_is_refused(api: Api) -> None:
    n = nonce()
    assert (await send(api, read_env(api, "owner", n))).status_code == 200
    api.clock.tick()
    out = refused(await send(api, read_env(api, "owner", n)), 422, "NONCE_REUSED")
    assert out["details"]["pointer"] == "/body/nonce"
    # nonces belong to their author: another actor's same value is not a replay of it
    assert (await send(api, read_env(api, "peer", n))).status_code == 200


async def test_remembered_requests_are_pruned_after_the_window(api: Api) -> None:
    old = read_env(api, "owner")
    assert (await send(api, old)).status_code == 200
    assert (await send(api, state_env(api, "owner", [], []))).status_code == 201
    api.clock.tick(RETENTION_MS + 1)
    await read(api, "owner")

    def rows(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT count(*) FROM personal_requests").fetchone()[0])

    assert await api.library.storage.read(rows) == 1
    refused(await send(api, old), 422, "TIMESTAMP_TOO_OLD")
    assert (await read(api, "owner")) is not None  # the current state is never pruned


# --- privacy ---------------------------------------------------------------------------------


async def test_an_actor_never_reads_another_actors_state(api: Api, ids: dict[str, str]) -> None:
    mine = (await send(api, state_env(api, "owner", [ids["claim"]], [ids["document"]]))).json()
    assert await read(api, "peer") is None
    # the author selects the account, and must be the certificate's actor
    p, o = api.founding.participants["peer"], api.founding.participants["owner"]
    rec = record(api, "peer", "personal-read", {"nonce": nonce()})
    rec["author"] = o.actor
    stolen = make_envelope(rec, p.certificate, p.worker)
    out = refused(await send(api, stolen), 403, "AUTHOR_NOT_CERTIFIED")
    assert "state" not in out["details"]
    rec = record(api, "peer", "personal-state", {"following": [], "saved": []},
                 previous=mine["state"]["id"])
    rec["author"] = o.actor
    refused(await send(api, make_envelope(rec, p.certificate, p.worker)), 403,
            "AUTHOR_NOT_CERTIFIED")
    # a peer's compare-and-set conflict shows the peer's own state, never the owner's
    out = refused(await send(api, state_env(api, "peer", [], [], previous=mine["state"]["id"])),
                  409, "PERSONAL_STATE_CONFLICT")
    assert out["details"] == {"head": "", "state": None}
    assert (await read(api, "owner")) == mine["state"]


async def test_personal_records_never_reach_the_public_ledger(
    api: Api, ids: dict[str, str]
) -> None:
    size = await api.library.storage.log_size()
    counts = await public_counts(api)
    reading = read_env(api, "owner")
    writing = state_env(api, "owner", [ids["claim"]], [ids["space"]])
    assert (await send(api, reading)).status_code == 200
    state = (await send(api, writing)).json()["state"]
    assert await api.library.storage.log_size() == size
    assert await public_counts(api) == counts
    for env in (reading, writing):
        rid = sha256_hex(canonical(env["record"]))
        assert (await api.client.get(f"/api/entries/{rid}")).status_code == 404
        assert (await api.client.get(f"/api/entries/{rid}/head")).status_code == 404
        # and /api/entries does not take them
        out = refused(await api.post(env), 422, "UNKNOWN_KIND")
        assert "personal-read" not in out["details"]["allowed"]
    assert state["id"] == sha256_hex(canonical(writing["record"]))
    authority = (await api.client.get("/api/authority")).json()["items"]
    assert all("record" not in item["document"] for item in authority)
    assert await api.library.storage.log_size() == size


async def test_public_kinds_are_not_taken_by_the_personal_route(api: Api) -> None:
    env = api.envelope("owner", {"kind": "space", "title": "S", "body": {"summary": "s"},
                                 "links": [], "previous": ""})
    out = refused(await send(api, env), 422, "UNKNOWN_KIND")
    assert out["details"]["allowed"] == ["personal-read", "personal-state"]
    refused(await send(api, b"{not json"), 400, "NOT_JSON")
    assert (await api.client.post("/api/personal?x=1", content=b"{}")).status_code == 400


# --- several processes on one database -------------------------------------------------------


async def test_state_is_shared_by_servers_on_one_database(
    api: Api, ids: dict[str, str], db: str | Path
) -> None:
    other = storage_for(db, api.founding.genesis)
    other.clock = api.clock
    app = create_app(Library(api.founding.genesis, other, api.founding.log_key))
    transport = httpx.ASGITransport(app=app)
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://other") as client):
            first = await send(api, state_env(api, "owner", [ids["claim"]], []), client)
            assert first.status_code == 201, first.text
            state = first.json()["state"]
            assert (await read(api, "owner")) == state
            lost = await send(api, state_env(api, "owner", [], []))
            assert refused(lost, 409, "PERSONAL_STATE_CONFLICT")["details"]["state"] == state
            n = nonce()
            assert (await send(api, read_env(api, "owner", n), client)).status_code == 200
            api.clock.tick()
            refused(await send(api, read_env(api, "owner", n)), 422, "NONCE_REUSED")
