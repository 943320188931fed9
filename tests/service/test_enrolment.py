"""Enrolment requests through the real app with a controllable clock: they expire (and are
purged), the open ones are capped, a code approves once, codes are forgiving to type, the
per-address limit slides (``service/enrolment.py``).  The CLI side is
``tests/cli/test_login.py``; floods against a live server ``tests/e2e/test_enrolment_flood.py``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from alexandria.core.keys import SigningKey
from alexandria.core.timestamps import format_ms
from alexandria.core.trust import make_worker_certificate
from alexandria.errors import Malformed, RateLimited
from alexandria.service import enrolment
from alexandria.service.enrolment import (
    LIST_HEADER,
    TTL_MS,
    AddressLimiter,
    KeptRate,
    list_header,
    normalize_code,
    signed_bytes,
)
from tests.support.library import Api


def _body(api: Api, key: SigningKey, name: str = "zoe") -> bytes:
    pin = api.founding.genesis.pin
    scopes = ["library.comment"]
    return orjson.dumps({"worker": key.public_hex, "name": name, "scopes": scopes,
                         "proof": key.sign(signed_bytes(pin, key.public_hex, name, scopes))})


async def _list(api: Api, key: SigningKey | None = None, skew_ms: int = 0) -> Any:
    """``GET /api/enrolments`` as the operator's CLI sends it: signed by the authority key."""
    at = format_ms(api.clock.ms + skew_ms)
    header = list_header(api.founding.genesis.pin, key or api.founding.authority, at)
    return await api.client.get("/api/enrolments", headers={LIST_HEADER: header})


def _certificate(api: Api, worker: str) -> dict[str, Any]:
    now = api.clock.ms
    return make_worker_certificate(api.founding.genesis, "ef" * 32, worker, ["library.comment"],
                                   api.founding.authority, format_ms(now - 1000),
                                   format_ms(now + 86_400_000))


async def test_a_request_expires(api: Api) -> None:
    key = SigningKey.generate()
    r = await api.client.post("/api/enrolments", content=_body(api, key))
    assert r.status_code == 201
    code = r.json()["code"]
    listing = (await _list(api)).json()["requests"]
    assert [x["code"] for x in listing] == [code] and listing[0]["name"] == "zoe"
    api.clock.tick(TTL_MS + 1)
    poll = await api.client.get(f"/api/enrolments/{code}", params={"worker": key.public_hex})
    assert poll.status_code == 404 and poll.json()["code"] == "UNKNOWN_CODE"
    assert (await _list(api)).json()["requests"] == []
    late = await api.client.post(f"/api/enrolments/{code}/certificate",
                                 content=orjson.dumps(_certificate(api, key.public_hex)))
    assert late.status_code == 404


async def test_a_code_approves_once_and_asking_again_replaces_the_request(api: Api) -> None:
    key = SigningKey.generate()
    first = (await api.client.post("/api/enrolments", content=_body(api, key))).json()["code"]
    code = (await api.client.post("/api/enrolments", content=_body(api, key))).json()["code"]
    assert code != first
    gone = await api.client.get(f"/api/enrolments/{first}", params={"worker": key.public_hex})
    assert gone.status_code == 404
    cert = orjson.dumps(_certificate(api, key.public_hex))
    ok = await api.client.post(f"/api/enrolments/{code.lower()}/certificate", content=cert)
    assert ok.status_code == 200
    poll = (await api.client.get(f"/api/enrolments/{code}",
                                 params={"worker": key.public_hex})).json()
    assert poll["status"] == "approved" and poll["certificate"]["certificate"]["worker"] == \
        key.public_hex
    again = await api.client.post(f"/api/enrolments/{code}/certificate", content=cert)
    assert again.status_code == 409 and again.json()["code"] == "CODE_USED"
    assert (await _list(api)).json()["requests"] == []


async def test_only_an_authority_of_the_library_lists_requests(api: Api) -> None:
    await api.client.post("/api/enrolments", content=_body(api, SigningKey.generate()))
    bare = await api.client.get("/api/enrolments")
    assert bare.status_code == 403 and bare.json()["code"] == "AUTHORITY_REQUIRED"
    stranger = await _list(api, SigningKey.generate())
    assert stranger.status_code == 403 and stranger.json()["code"] == "AUTHORITY_UNKNOWN"
    stale = await _list(api, skew_ms=-10 * 60 * 1000)
    assert stale.status_code == 403 and stale.json()["code"] == "STALE_SIGNATURE"
    forged = list_header(api.founding.genesis.pin, SigningKey.generate(), api.clock.now())
    key = api.founding.authority.public_hex
    r = await api.client.get("/api/enrolments",
                             headers={LIST_HEADER: f"{key} {forged.split(' ', 1)[1]}"})
    assert r.status_code == 403 and r.json()["code"] == "PROOF_INVALID"
    assert len((await _list(api)).json()["requests"]) == 1


def test_codes_are_forgiving_to_type() -> None:
    assert normalize_code(" k7qf2xmb ") == "K7QF-2XMB"
    assert normalize_code("o0il-1111") == "0011-1111"
    with pytest.raises(Malformed):
        normalize_code("K7QF-2XM")
    with pytest.raises(Malformed):
        normalize_code("K7QF-2XMU")  # U is not in the alphabet


def test_the_address_limit_slides() -> None:
    limiter = AddressLimiter(per_address=2, window_ms=1000)
    limiter.check("a", 0)
    limiter.check("a", 10)
    limiter.check("b", 10)
    with pytest.raises(RateLimited) as caught:
        limiter.check("a", 500)
    assert caught.value.details["retry_after"] == 1
    limiter.check("a", 1001)


def test_a_refunded_request_leaves_the_allowance_whole() -> None:
    """A request the process's rate refused (``ENROLMENTS_BUSY``) after the address's limit
    counted it is taken back: a client retrying as told does not run out of its allowance."""
    limiter = AddressLimiter(per_address=2, window_ms=1000)
    for _ in range(5):
        limiter.check("a", 0)
        limiter.refund("a")
    limiter.check("a", 0)
    limiter.check("a", 0)
    with pytest.raises(RateLimited):
        limiter.check("a", 0)
    limiter.refund("never-seen")  # nothing counted: nothing to take back


def _writes(api: Api, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the transactions handed to the single writer from now on."""
    storage = api.library.storage
    calls: list[int] = []
    write = storage.write

    async def counted(fn: Any, checks_first: bool = False) -> Any:
        calls.append(1)
        return await write(fn, checks_first)

    monkeypatch.setattr(storage, "write", counted)
    return calls


async def _rows(api: Api) -> int:
    """Rows of the table, expired ones included."""
    def count(conn: Any) -> int:
        return int(conn.execute("SELECT count(*) FROM enrolment_requests").fetchone()[0])

    return await api.library.storage.read(count)


async def test_the_expiry_is_stated_and_expired_requests_are_purged(api: Api) -> None:
    r = await api.client.post("/api/enrolments", content=_body(api, SigningKey.generate()))
    assert r.json()["expires_at"] == format_ms(api.clock.ms + TTL_MS)  # 15 minutes
    api.clock.tick(TTL_MS - 1)
    assert len((await _list(api)).json()["requests"]) == 1
    api.clock.tick(2)
    assert (await _list(api)).json() == {"requests": [], "total": 0}
    assert await _rows(api) == 1  # not answered, not yet deleted
    await api.client.post("/api/enrolments", content=_body(api, SigningKey.generate()))
    assert await _rows(api) == 1  # the next request kept deleted it


async def test_open_requests_are_capped_and_refused_without_the_writer(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enrolment, "MAX_OPEN", 3)
    keys = [SigningKey.generate() for _ in range(3)]
    for key in keys:
        api.clock.tick(60_000)
        r = await api.client.post("/api/enrolments", content=_body(api, key))
        assert r.status_code == 201
    writes = _writes(api, monkeypatch)
    full = await api.client.post("/api/enrolments", content=_body(api, SigningKey.generate()))
    assert full.status_code == 429 and full.json()["code"] == "ENROLMENTS_FULL"
    # until the oldest expires: it was made 2 minutes ago
    retry = (TTL_MS - 120_000) // 1000 + 1
    assert full.headers["retry-after"] == str(retry) == str(full.json()["details"]["retry_after"])
    assert writes == []
    again = await api.client.post("/api/enrolments", content=_body(api, keys[1]))
    assert again.status_code == 201 and len(writes) == 1  # a key may replace its own request
    api.clock.tick(TTL_MS - 120_000 + 1)  # the oldest expired: room for one
    late = await api.client.post("/api/enrolments", content=_body(api, SigningKey.generate()))
    assert late.status_code == 201
    listing = (await _list(api)).json()
    assert listing["total"] == 3 and len(listing["requests"]) == 3


async def test_a_stranger_and_a_limit_never_reach_the_writer(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    key = SigningKey.generate()
    code = (await api.client.post("/api/enrolments", content=_body(api, key))).json()["code"]
    writes = _writes(api, monkeypatch)
    stranger = await _list(api, SigningKey.generate())
    assert stranger.status_code == 403 and stranger.json()["code"] == "AUTHORITY_UNKNOWN"
    header = list_header(api.founding.genesis.pin, SigningKey.generate(), api.clock.now())
    one = await api.client.get(f"/api/enrolments/{code}", headers={LIST_HEADER: header})
    assert one.status_code == 403
    newest = code
    for _ in range(enrolment.PER_KEY - 1):
        r = await api.client.post("/api/enrolments", content=_body(api, key))
        assert r.status_code == 201
        newest = r.json()["code"]
    limited = await api.client.post("/api/enrolments", content=_body(api, key))
    assert limited.status_code == 429 and limited.json()["details"]["per"] == "key"
    assert len(writes) == enrolment.PER_KEY - 1  # the kept requests only
    header = {LIST_HEADER: list_header(api.founding.genesis.pin, api.founding.authority,
                                       api.clock.now())}
    replaced = await api.client.get(f"/api/enrolments/{code}", headers=header)
    assert replaced.status_code == 404 and replaced.json()["code"] == "UNKNOWN_CODE"
    found = (await api.client.get(f"/api/enrolments/{newest.lower()}", headers=header)).json()
    assert found["code"] == newest and found["status"] == "pending"
    assert found["worker"] == key.public_hex and found["scopes"] == ["library.comment"]


def test_a_process_keeps_requests_at_a_bounded_rate() -> None:
    rate = KeptRate(per_second=2, burst=3)
    for _ in range(3):
        rate.take(0)
    with pytest.raises(RateLimited) as caught:
        rate.take(100)
    assert caught.value.code == "ENROLMENTS_BUSY" and caught.value.details["retry_after"] == 1
    rate.take(500)  # half a second: one more
    with pytest.raises(RateLimited):
        rate.take(500)
    for _ in range(3):  # a long pause refills the burst, no more
        rate.take(60_000)
    with pytest.raises(RateLimited):
        rate.take(60_000)
