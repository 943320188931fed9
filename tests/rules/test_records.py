"""PROTOCOL §4, the stateless steps through the real HTTP app: body size (413), envelope shape
(400), record shape (422) — and the signed record that an admission answers."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from alexandria.core.canonical import canonical
from alexandria.core.keys import verify
from alexandria.core.records import MAX_BODY_CHARACTERS, MAX_ENVELOPE_BYTES, revision_id
from tests.support.admission import admitted, claim, refused, reply, space
from tests.support.library import Api


def mutated(env: dict[str, Any], **record: Any) -> dict[str, Any]:
    """``env`` with record fields changed (the proof no longer matches: shape comes first)."""
    out = copy.deepcopy(env)
    out["record"].update(record)
    return out


def resigned(api: Api, who: str, record: dict[str, Any]) -> dict[str, Any]:
    """An envelope whose worker really signed ``record`` (only what is tested is wrong)."""
    p = api.founding.participants[who]
    return {"record": record,
            "signature": {"certificate": p.certificate, "proof": p.worker.sign(canonical(record))}}


# --- 413: body size, before parsing ----------------------------------------------------------


async def test_body_at_the_limit_is_admitted_and_one_byte_more_is_413(api: Api) -> None:
    env = api.envelope("owner", space())
    data = json.dumps(env).encode()
    padded = data + b" " * (MAX_ENVELOPE_BYTES - len(data))  # JSON allows trailing space
    assert len(padded) == MAX_ENVELOPE_BYTES
    await refused(api, padded + b" ", 413, "BODY_TOO_LARGE")
    r = await api.post(padded)
    assert r.status_code == 201, r.text


async def test_oversized_body_is_413_even_when_not_json_and_without_content_length(
    api: Api,
) -> None:
    await refused(api, b"x" * (MAX_ENVELOPE_BYTES + 1), 413, "BODY_TOO_LARGE")

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(MAX_ENVELOPE_BYTES // 4096 + 1):
            yield b" " * 4096

    size = await api.library.storage.log_size()
    r = await api.client.post("/api/entries", content=chunks())
    assert "content-length" not in r.request.headers
    assert r.status_code == 413 and r.json()["code"] == "BODY_TOO_LARGE"
    assert await api.library.storage.log_size() == size


# --- 400: envelope shape -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "NOT_JSON"),
        (b"{", "NOT_JSON"),
        (b"\xff\xfe{}", "NOT_JSON"),
        (b'{"record": {}, "record": {}, "signature": {}}', "NOT_JSON"),
        (b'{"record": NaN, "signature": {}}', "NOT_JSON"),
        (b"[]", "BAD_ENVELOPE"),
        (b'"envelope"', "BAD_ENVELOPE"),
        (b'{"record": {}}', "BAD_ENVELOPE"),
    ],
)
async def test_bytes_that_are_not_an_envelope_are_400(api: Api, data: bytes, code: str) -> None:
    await refused(api, data, 400, code)


async def test_request_bodies_are_utf8(api: Api) -> None:
    env = api.envelope("owner", space(title="Café"))
    text = json.dumps(env, ensure_ascii=False)
    for data in (text.encode("utf-16"), text.encode("utf-32"), b"\xef\xbb\xbf" + text.encode(),
                 text.encode("latin-1")):
        await refused(api, data, 400, "NOT_JSON")
    r = await api.post(text.encode())
    assert r.status_code == 201, r.text


async def test_envelope_shape_is_exact(api: Api) -> None:
    env = api.envelope("owner", space())
    await refused(api, {**env, "extra": 1}, 400, "BAD_ENVELOPE")
    await refused(api, {"record": env["record"]}, 400, "BAD_ENVELOPE")
    sig = env["signature"]
    for bad in ({**sig, "extra": 1}, {"certificate": sig["certificate"]}, "proof",
                {**sig, "proof": 7}):
        await refused(api, {"record": env["record"], "signature": bad}, 400, "BAD_ENVELOPE")
    await admitted(api, env)


# --- 422: record shape -------------------------------------------------------------------------


async def test_record_fields_are_exact(api: Api) -> None:
    env = api.envelope("owner", space())
    body = await refused(api, mutated(env, extra="x"), 422, "UNKNOWN_FIELD")
    assert body["details"]["unknown"] == ["extra"]
    assert body["details"]["pointer"] == "/record/extra"
    missing = copy.deepcopy(env)
    del missing["record"]["previous"]
    body = await refused(api, missing, 422, "MISSING_FIELD")
    assert body["details"]["missing"] == ["previous"]
    await refused(api, {**env, "record": [env["record"]]}, 422, "RECORD_SHAPE")
    await admitted(api, env)


async def test_unknown_kinds_and_formats_are_422(api: Api) -> None:
    env = api.envelope("owner", space())
    body = await refused(api, mutated(env, kind="poem"), 422, "UNKNOWN_KIND")
    allowed = body["details"]["allowed"]
    assert "vote" in allowed and "personal-state" not in allowed
    # personal lists have their own route; they are never public contributions
    await refused(api, mutated(env, kind="personal-state"), 422, "UNKNOWN_KIND")
    await refused(api, mutated(env, format="alexandria.contribution/2"), 422, "BAD_FORMAT")
    await admitted(api, env)


@pytest.mark.parametrize(
    "stamp",
    [
        "2026-06-01T00:00:00Z",  # no milliseconds
        "2026-06-01T00:00:00.0000Z",
        "2026-06-01T00:00:00.000+00:00",
        "2026-06-01T00:00:00.000z",
        "2026-06-01 00:00:00.000Z",
        "2026-06-01T00:00:00.000Z\n",
        "2026-02-30T00:00:00.000Z",  # no such day
        "2026-06-01T24:00:00.000Z",
        "２０２６-06-01T00:00:00.000Z",  # digits, but not ASCII digits
        "",
    ],
)
async def test_timestamp_syntax_is_exact(api: Api, stamp: str) -> None:
    env = api.envelope("owner", space())
    body = await refused(api, mutated(env, authored_at=stamp), 422, "BAD_TIMESTAMP")
    assert body["details"]["pointer"] == "/record/authored_at"


async def test_field_types_and_formats(api: Api) -> None:
    env = api.envelope("owner", space())
    hexa = "a" * 64
    bad: dict[str, Any]
    for bad in (
        {"author": hexa.upper()}, {"author": hexa + "\n"}, {"previous": "abc"},
        {"previous": hexa + "\n"}, {"genesis": "pin"}, {"title": 5}, {"links": {}},
        {"links": [{"relation": "cites"}]}, {"links": [{"relation": "cites", "target": hexa,
                                                        "note": "x"}]},
        {"body": {"summary": "x"}}, {"kind": None},
    ):
        await refused(api, mutated(env, **bad), 422, "RECORD_SHAPE")
    await admitted(api, env)


@pytest.mark.parametrize(
    "body",
    [
        '{"summary": "A space"}',  # whitespace
        '{"summary":"A space"}\n',
        '{"summary":"caf\\u00e9"}',  # JCS writes é itself
        '{"summary":"A space","summary":"again"}',  # duplicate key
        "not json",
        "",
    ],
)
async def test_object_bodies_must_be_canonical_json(api: Api, body: str) -> None:
    env = api.envelope("owner", space())
    out = await refused(api, resigned(api, "owner", {**env["record"], "body": body}), 422,
                        "NON_CANONICAL_BODY")
    assert out["details"]["pointer"] == "/record/body"


async def test_key_order_of_a_body_is_canonical(api: Api) -> None:
    env = api.envelope("owner", claim())
    decoded = json.loads(env["record"]["body"])
    unsorted = json.dumps(dict(reversed(list(decoded.items()))), separators=(",", ":"))
    assert unsorted != env["record"]["body"]
    body = await refused(api, resigned(api, "owner", {**env["record"], "body": unsorted}), 422,
                         "NON_CANONICAL_BODY")
    assert body["details"]["expected"] == env["record"]["body"]
    await admitted(api, env)


async def test_floats_and_unsafe_integers_are_422(api: Api) -> None:
    env = api.envelope("owner", claim())
    record = env["record"]
    for body in ('{"assumptions":[],"scope":"s","statement":"x","weight":1.5}',
                 '{"assumptions":[],"scope":"s","statement":"x","weight":1e2}',
                 '{"assumptions":[],"scope":"s","statement":"x","weight":9007199254740992}'):
        out = await refused(api, resigned(api, "owner", {**record, "body": body}), 422,
                            "FLOAT_NOT_ALLOWED")
        assert out["details"]["pointer"] == "/record/body/weight"
    out = await refused(api, mutated(env, links=[{"relation": "cites", "target": 1.5}]), 422,
                        "FLOAT_NOT_ALLOWED")
    assert out["details"]["pointer"] == "/record/links/0/target"
    # a safe integer is not a float: the content schema decides (no such field)
    body = '{"assumptions":[],"scope":"s","statement":"x","weight":2}'
    await refused(api, resigned(api, "owner", {**record, "body": body}), 422, "SCHEMA_VIOLATION")


async def test_body_length_counts_characters_up_to_48000(api: Api) -> None:
    disc = await admitted(api, api.envelope("owner", {
        "kind": "discussion", "title": "D", "body": {"text": "t"}, "links": [], "previous": ""}))
    parent = {"relation": "replies_to", "target": disc["id"]}
    too_long = api.envelope("owner", reply(parent, text="x" * (MAX_BODY_CHARACTERS + 1)))
    out = await refused(api, too_long, 422, "BODY_TOO_LONG")
    assert out["details"]["limit"] == MAX_BODY_CHARACTERS
    big_claim = claim(statement="x" * MAX_BODY_CHARACTERS)  # its JSON encoding is longer
    await refused(api, api.envelope("owner", big_claim), 422, "BODY_TOO_LONG")
    await admitted(api, api.envelope("owner", reply(parent, text="x" * MAX_BODY_CHARACTERS)))
    # characters, not bytes: 30,000 two-byte characters are 60,000 bytes of UTF-8
    wide = api.envelope("owner", reply(parent, text="é" * 30_000))
    r = await api.post(json.dumps(wide, ensure_ascii=False).encode())
    assert r.status_code == 201, r.text


async def test_lone_surrogates_have_no_canonical_form(api: Api) -> None:
    env = api.envelope("owner", space())
    data = json.dumps(env).replace('"title": "Space"', '"title": "\\ud800"').encode()
    assert b"ud800" in data
    await refused(api, data, 400, "NOT_JSON")


async def test_shape_is_checked_before_certificate_and_proof(api: Api) -> None:
    env = api.envelope("owner", space())
    broken = mutated(env, extra="x")
    broken["signature"] = {"certificate": {"nonsense": 1}, "proof": "00"}
    await refused(api, broken, 422, "UNKNOWN_FIELD")


# --- the signed record -------------------------------------------------------------------------


async def test_signed_record_verifies_with_only_the_genesis(api: Api) -> None:
    env = api.envelope("owner", space())
    signed = await admitted(api, env)
    assert set(signed) == {"id", "root", "record", "signature", "admission"}
    assert signed["record"] == env["record"] and signed["signature"] == env["signature"]
    assert signed["id"] == signed["root"] == revision_id(env["record"])
    assert signed["id"] == hashlib.sha256(canonical(signed["record"])).hexdigest()
    cert = signed["signature"]["certificate"]["certificate"]
    assert verify(cert["worker"], signed["signature"]["proof"], canonical(signed["record"]))
    admission = signed["admission"]
    assert set(admission) == {"sequence", "admitted_at", "authority"}
    assert admission["authority"] == api.founding.authority_certificate
    assert admission["sequence"] == await api.library.storage.log_size()
    got = await api.client.get(f"/api/entries/{signed['id']}")
    assert got.status_code == 200 and got.json() == signed
    assert got.content == canonical(signed)
