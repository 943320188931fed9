"""One contribution can never fail another's write: nesting is capped when JSON is
parsed, on every route, and a job of the writer's batch that fails unexpectedly fails alone."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from typing import Any

import pytest

from alexandria.core.canonical import MAX_JSON_DEPTH
from alexandria.rules.admission import Candidate, prepare
from alexandria.service.bootstrap import found_library
from alexandria.store import admission
from alexandria.store.interface import Admitted
from alexandria.store.ledger_storage import LedgerStorage
from alexandria.store.protocol import READERS
from tests.support.admission import proposal
from tests.support.library import T0, Api


def _claim(title: str) -> dict[str, Any]:
    return {"kind": "claim", "title": title, "links": [], "previous": "",
            "body": {"statement": title, "scope": "Tests", "assumptions": []}}


def _nested(levels: int) -> Any:
    """An object nested ``2 * levels`` deep (an object, then an array, at each level)."""
    value: Any = "bottom"
    for _ in range(levels):
        value = {"a": [value]}
    return value


def _deep_bytes(depth: int) -> bytes:
    """An envelope-looking object whose record nests ``depth`` arrays: ``depth + 1`` deep."""
    return b'{"record":' + b"[" * depth + b"]" * depth + b',"signature":{}}'


async def test_a_deep_body_under_a_self_signed_certificate_is_a_typed_400(api: Api) -> None:
    # a certificate from a library of the attacker's own: nothing chains to this genesis
    other = found_library(seed=b"mallory's own library", created_at=T0)
    mallory = other.enroll("mallory")
    env = mallory.envelope(api.founding.genesis, _claim("Deep"), api.clock.tick())
    env["record"]["extra"] = _nested(400)
    r = await api.post(json.dumps(env).encode())
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "JSON_TOO_DEEP"
    assert r.json()["details"] == {"limit": MAX_JSON_DEPTH}


async def test_every_route_that_parses_json_caps_its_depth(api: Api) -> None:
    deep = _deep_bytes(20_000)  # beyond Python's recursion limit, within every body limit
    for path in ("/api/entries", "/api/authority", "/api/personal", "/api/entries?dry_run=true"):
        r = await api.client.post(path, content=deep)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["code"] == "JSON_TOO_DEEP", (path, r.text)
    r = await api.client.post("/api/entries", content=_deep_bytes(MAX_JSON_DEPTH))
    assert r.json()["code"] == "JSON_TOO_DEEP"
    r = await api.client.post("/api/entries", content=_deep_bytes(MAX_JSON_DEPTH - 1))
    assert r.json()["code"] != "JSON_TOO_DEEP"  # refused later, for its shape


async def test_deep_proposals_fail_no_bystander(api: Api) -> None:
    """The audit's attack: proposals whose proposed body nests ~300 deep, dry runs included,
    sent while 40 bystanders publish: every bystander is admitted."""
    base = (await api.publish("owner", _claim("Base")))["id"]
    attacks = [
        api.envelope("peer", proposal(base, "T", _nested(150), [])) for _ in range(10)
    ]
    bystanders = [api.envelope("owner", _claim(f"Bystander {i}")) for i in range(40)]
    posts = [api.post(e, dry_run="true") if i % 2 else api.post(e)
             for i, e in enumerate(attacks)]
    answers = await asyncio.gather(*posts, *(api.post(e) for e in bystanders))
    for r in answers[: len(attacks)]:
        assert 400 <= r.status_code < 500, r.text
        assert "JSON_TOO_DEEP" in r.text or r.json()["code"] == "NON_CANONICAL_BODY", r.text
    assert [r.status_code for r in answers[len(attacks):]] == [201] * len(bystanders)


async def test_a_job_failing_unexpectedly_fails_alone(api: Api) -> None:
    """A bug in one admission of a batch (here: a job raising a plain RuntimeError halfway
    through its writes) rolls back only itself; the rest of its batch is admitted."""
    storage = api.library.storage
    assert isinstance(storage, LedgerStorage)
    gate = threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        gate.wait(10)  # the writer thread waits: everything below queues into one batch

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO meta (key, value) VALUES ('half-written', 'x')")
        raise RuntimeError("a bug")

    held = asyncio.ensure_future(storage.write(hold))
    await asyncio.sleep(0.05)
    bystanders = [api.post(api.envelope("owner", _claim(f"Bystander {i}"))) for i in range(8)]
    tasks = [asyncio.ensure_future(b) for b in bystanders[:4]]
    await asyncio.sleep(0.05)
    bad = asyncio.ensure_future(storage.write(broken, checks_first=True))
    tasks += [asyncio.ensure_future(b) for b in bystanders[4:]]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    answers = await asyncio.gather(*tasks)
    assert [r.status_code for r in answers] == [201] * 8, [r.text for r in answers]
    try:
        await bad
    except RuntimeError as exc:
        assert str(exc) == "a bug"
    else:
        raise AssertionError("the broken job succeeded")

    def half_written(conn: sqlite3.Connection) -> Any:
        return conn.execute("SELECT value FROM meta WHERE key = 'half-written'").fetchone()

    assert await storage.write(half_written) is None


async def test_a_candidate_failing_unexpectedly_in_a_bulk_fails_alone(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in one candidate of ``admit_many`` after its leaf was written: the batch is rolled
    back and run again, each candidate in its own savepoint (the writer's one rerun policy), so
    that candidate alone is answered with the error and leaves nothing behind; the others are
    admitted, in order, at consecutive sequences."""
    storage = api.library.storage
    before = await storage.log_size()

    def candidate(title: str) -> Candidate:
        return prepare(json.dumps(api.envelope("owner", _claim(title))).encode(),
                       api.founding.genesis)

    cands = [candidate("Before"), candidate("Broken"), candidate("After")]
    broken_id = cands[1].record.id
    real = admission.store_contribution

    def store(conn: sqlite3.Connection, memory: Any, cand: Candidate, v: Any, seq: int) -> None:
        if v.id == broken_id:
            raise RuntimeError("a bug")
        real(conn, memory, cand, v, seq)

    monkeypatch.setattr(admission, "store_contribution", store)
    first, failed, last = await storage.admit_many(cands)
    assert isinstance(failed, RuntimeError) and str(failed) == "a bug"
    assert isinstance(first, Admitted) and isinstance(last, Admitted)
    assert (first.sequence, last.sequence) == (before + 1, before + 2)
    assert await storage.log_size() == before + 2
    assert await storage.entry(broken_id) is None
    assert await storage.entry(last.id) == last.signed


async def test_slow_reads_do_not_hold_up_other_reads(api: Api) -> None:
    """The audit's 20 slow searches delayed an unrelated entry read by 8.7 s (one shared read
    connection). With a pool, reads that hold all but one reader connection leave an entry
    read free to answer at once."""
    storage = api.library.storage
    assert isinstance(storage, LedgerStorage)
    rev = (await api.publish("owner", _claim("Unrelated")))["id"]
    gate = threading.Event()

    def slow(conn: sqlite3.Connection) -> None:
        conn.execute("SELECT count(*) FROM meta").fetchone()
        gate.wait(10)  # a search that takes its time, holding its connection

    held = [asyncio.ensure_future(storage.read(slow)) for _ in range(READERS - 1)]
    try:
        await asyncio.sleep(0.1)
        r = await asyncio.wait_for(api.client.get(f"/api/entries/{rev}"), 5)
        assert r.status_code == 200
        assert not any(h.done() for h in held)  # answered while the slow reads still ran
    finally:
        gate.set()
        await asyncio.gather(*held)
