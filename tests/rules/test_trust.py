"""The trust chain (PROTOCOL §2) through the real HTTP app: genesis, authority certificates with
a 2-of-3 root threshold, worker certificates inside envelopes, proofs, revocations, and the
validity windows — each refusal with its status and code, and nothing stored."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from alexandria.api.status import status_of
from alexandria.core.canonical import canonical, sha256_hex
from alexandria.core.keys import SigningKey
from alexandria.core.records import make_envelope, make_record
from alexandria.core.timestamps import parse_ms
from alexandria.core.trust import (
    Genesis,
    make_authority_certificate,
    make_genesis,
    make_revocation,
    make_worker_certificate,
    parse_worker_certificate,
    sign_document,
)
from alexandria.errors import AlexandriaError
from alexandria.service.bootstrap import Founding, found_library
from tests.support.admission import admitted, check_error_body, refused, serve, space
from tests.support.library import SEED, T0, Api, Clock

FAR = "2036-01-01T00:00:00.000Z"


def stranger(label: str) -> SigningKey:
    return SigningKey(sha256_hex(label.encode()).encode()[:32])


def envelope_with(api: Api, certificate: dict[str, Any], worker: SigningKey, actor: str,
                  content: dict[str, Any] | None = None) -> dict[str, Any]:
    record = make_record(api.founding.genesis.pin, actor, api.clock.tick(), content or space())
    return make_envelope(record, certificate, worker)


def worker_cert(api: Api, authority: SigningKey, actor: str, worker: SigningKey,
                scopes: list[str] | None = None, not_before: str = T0,
                not_after: str = FAR) -> dict[str, Any]:
    return make_worker_certificate(
        api.founding.genesis, actor, worker.public_hex, scopes or ["library.curate"], authority,
        not_before, not_after,
    )


async def post_authority(api: Api, document: Any) -> Any:
    data = document if isinstance(document, bytes) else canonical(document)
    return await api.client.post("/api/authority", content=data)


async def authority_refused(api: Api, document: Any, status: int, code: str) -> dict[str, Any]:
    size = await api.library.storage.log_size()
    body = check_error_body(await post_authority(api, document), status, code)
    assert await api.library.storage.log_size() == size
    return body


# --- genesis -----------------------------------------------------------------------------------


def test_genesis_pin_is_the_hash_of_the_canonical_payload() -> None:
    f = found_library(seed=SEED, roots=3, threshold=2)
    assert f.genesis.pin == sha256_hex(canonical(f.genesis_document["genesis"]))
    assert Genesis.from_document(f.genesis_document, pin=f.genesis.pin) == f.genesis
    with pytest.raises(AlexandriaError) as err:
        Genesis.from_document(f.genesis_document, pin="0" * 64)
    assert err.value.code == "GENESIS_PIN_MISMATCH" and status_of(err.value) == 403


def test_genesis_needs_threshold_distinct_root_signatures() -> None:
    roots = [stranger(f"root{i}") for i in range(3)]
    doc = make_genesis("lib", "example.org/log", T0, roots, 2)
    assert Genesis.from_document(doc).threshold == 2
    one = copy.deepcopy(doc)
    one["signatures"] = one["signatures"][:1]
    twice = copy.deepcopy(one)
    twice["signatures"] = one["signatures"] * 2  # the same root twice is not two signers
    for bad, code in ((one, "GENESIS_SIGNATURES"), (twice, "DUPLICATE_SIGNATURE")):
        with pytest.raises(AlexandriaError) as err:
            Genesis.from_document(bad)
        assert err.value.code == code
    extra = copy.deepcopy(doc)
    extra["genesis"]["note"] = "x"
    with pytest.raises(AlexandriaError) as err:
        Genesis.from_document(extra)
    assert err.value.code == "CERTIFICATE_FIELDS"
    for origin in ("https://example.org/log", "example.org/log\n", ""):
        with pytest.raises(AlexandriaError) as err:
            Genesis.from_document(make_genesis("lib", origin, T0, roots, 2))
        assert err.value.code == "GENESIS_INVALID"


async def test_genesis_route_serves_the_pinned_document(api: Api) -> None:
    r = await api.client.get("/api/genesis")
    assert r.json() == {"pin": api.founding.genesis.pin, "document": api.founding.genesis_document}


# --- authority certificates, 2-of-3 ------------------------------------------------------------


@pytest.fixture
def founding3() -> Founding:
    f = found_library(seed=b"three-roots", created_at=T0, roots=3, threshold=2)
    f.enroll("owner")
    return f


@pytest.fixture
async def api3(tmp_path: Path, founding3: Founding, clock: Clock) -> AsyncIterator[Api]:
    async for api in serve(tmp_path, founding3, clock, documents=[]):
        yield api


async def test_authority_certificate_needs_two_of_three_roots(api3: Api) -> None:
    f = api3.founding
    key = f.authority.public_hex

    def cert(signers: list[SigningKey]) -> dict[str, Any]:
        return make_authority_certificate(
            f.genesis, key, ["native-application"], T0, FAR, signers)

    owner = f.participants["owner"]
    env = owner.envelope(f.genesis, space(), api3.clock.tick())
    await refused(api3, env, 403, "AUTHORITY_UNKNOWN")  # nothing certified yet
    body = await authority_refused(api3, cert([f.roots[0]]), 403, "AUTHORITY_SIGNATURES")
    assert body["details"] == {"valid": 1, "threshold": 2}
    doubled = cert([f.roots[0]])
    doubled["signatures"] *= 2  # one root signing twice is not two signers: refused unverified
    body = await authority_refused(api3, doubled, 403, "DUPLICATE_SIGNATURE")
    assert body["details"] == {"pointer": "/signatures/1", "key": f.roots[0].public_hex}
    await authority_refused(api3, cert([f.roots[0], stranger("not a root")]), 403,
                            "AUTHORITY_SIGNATURES")
    forged = cert([f.roots[0], f.roots[2]])
    forged["certificate"]["not_after"] = "2099-01-01T00:00:00.000Z"
    await authority_refused(api3, forged, 403, "AUTHORITY_SIGNATURES")

    good = cert([f.roots[0], f.roots[2]])  # any two of the three
    r = await post_authority(api3, good)
    assert r.status_code == 201, r.text
    first = r.json()
    assert first["document"] == good and first["sequence"] == 1
    again = await post_authority(api3, good)
    assert again.status_code == 200 and again.json() == first
    assert await api3.library.storage.log_size() == 1
    listed = (await api3.client.get("/api/authority")).json()["items"]
    assert [(i["sequence"], i["type"], i["document"]) for i in listed] == [
        (1, "certificate", good)]
    await admitted(api3, env)


async def test_authority_certificate_of_another_genesis_is_403(api: Api) -> None:
    other = found_library(seed=b"another library", created_at=T0)
    doc = make_authority_certificate(
        other.genesis, api.founding.authority.public_hex, ["native-application"], T0, FAR,
        api.founding.roots)
    body = await authority_refused(api, doc, 403, "GENESIS_MISMATCH")
    assert body["details"]["expected"] == api.founding.genesis.pin


def _payload_variants(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    change: dict[str, Any]
    for change in ({"note": "x"}, {"roles": ["native-application", "log"]},
                   {"roles": ["root"]}, {"roles": []}, {"not_before": "2026-01-01"},
                   {"key": "A" * 64}, {"format": "alexandria.authority-certificate/2"}):
        bad = copy.deepcopy(doc)
        bad["certificate"].update(change)
        out.append(bad)
    missing = copy.deepcopy(doc)
    del missing["certificate"]["roles"]
    return [*out, missing]


async def test_authority_documents_of_the_wrong_shape_are_400(api: Api) -> None:
    doc = make_authority_certificate(
        api.founding.genesis, stranger("new authority").public_hex, ["native-application"], T0,
        FAR, api.founding.roots)
    sig = doc["signatures"][0]
    payload = doc["certificate"]
    shapes: list[tuple[Any, str]] = [
        (b"{", "NOT_JSON"), (b"[]", "BAD_DOCUMENT"), ({"certificate": payload}, "BAD_DOCUMENT"),
        ({**doc, "extra": 1}, "BAD_DOCUMENT"),
        ({"certificate": payload, "signatures": []}, "BAD_DOCUMENT"),
        ({"certificate": "text", "signatures": doc["signatures"]}, "BAD_DOCUMENT"),
        ({"certificate": payload, "signatures": [{**sig, "note": 1}]}, "BAD_SIGNATURE_ENTRY"),
        ({"certificate": payload, "signatures": [{**sig, "key": sig["key"] + "\n"}]},
         "BAD_SIGNATURE_ENTRY"),
        ({"certificate": payload, "signatures": [{**sig, "signature": "00"}]},
         "BAD_SIGNATURE_ENTRY"),
        ({"thing": payload, "signatures": doc["signatures"]}, "BAD_DOCUMENT"),
        (api.founding.genesis_document, "BAD_DOCUMENT"),
        *((bad, "CERTIFICATE_FIELDS") for bad in _payload_variants(doc)[:-2]),
        (_payload_variants(doc)[-2], "NOT_AN_AUTHORITY_DOCUMENT"),
        (_payload_variants(doc)[-1], "CERTIFICATE_FIELDS"),
        # worker certificates travel inside envelopes, never on their own
        (api.founding.participants["owner"].certificate, "NOT_AN_AUTHORITY_DOCUMENT"),
    ]
    for shape, code in shapes:
        await authority_refused(api, shape, 400, code)
    r = await api.client.post("/api/authority?x=1", content=canonical(doc))
    check_error_body(r, 400, "UNKNOWN_PARAMETER")
    await authority_refused(api, b" " * 65_537, 413, "BODY_TOO_LARGE")
    assert (await post_authority(api, doc)).status_code == 201


async def test_worker_certificate_posted_as_authority_document_is_named(api: Api) -> None:
    body = await authority_refused(api, api.founding.participants["owner"].certificate, 400,
                                   "NOT_AN_AUTHORITY_DOCUMENT")
    assert "alexandria.revocation/1" in body["details"]["allowed"]


# --- worker certificates inside envelopes ------------------------------------------------------


async def test_worker_certificate_signed_by_an_unknown_or_log_only_authority(api: Api) -> None:
    owner = api.founding.participants["owner"]
    for signer in (stranger("unknown authority"), api.founding.log_key, api.founding.roots[0]):
        cert = worker_cert(api, signer, owner.actor, owner.worker)
        body = await refused(api, envelope_with(api, cert, owner.worker, owner.actor), 403,
                             "AUTHORITY_UNKNOWN")
        assert body["details"]["authority"] == signer.public_hex
    cert = worker_cert(api, api.founding.authority, owner.actor, owner.worker)
    await admitted(api, envelope_with(api, cert, owner.worker, owner.actor))


async def test_worker_certificate_signature_and_fields(api: Api) -> None:
    owner = api.founding.participants["owner"]
    good = worker_cert(api, api.founding.authority, owner.actor, owner.worker)

    def variant(**change: Any) -> dict[str, Any]:
        bad = copy.deepcopy(good)
        bad["certificate"].update(change)
        return bad

    cases: list[tuple[Any, str]] = [
        (variant(scopes=["library.curate", "library.vote"]), "CERTIFICATE_SIGNATURE"),
        ({**good, "signatures": good["signatures"] * 2}, "DUPLICATE_SIGNATURE"),
        (sign_document("certificate", good["certificate"], [stranger("x")]),
         "CERTIFICATE_SIGNATURE"),
        (variant(note="x"), "CERTIFICATE_FIELDS"),
        (variant(scopes=["library.vote", "library.curate"]), "CERTIFICATE_FIELDS"),
        (variant(scopes=["library.admin"]), "CERTIFICATE_FIELDS"),
        (variant(scopes=[]), "CERTIFICATE_FIELDS"),
        (variant(actor=owner.actor + "\n"), "CERTIFICATE_FIELDS"),
        (variant(format="alexandria.worker-certificate/2"), "BAD_FORMAT"),
        (variant(genesis="0" * 64), "GENESIS_MISMATCH"),
        (variant(not_before=FAR, not_after=T0), "CERTIFICATE_WINDOW"),
        ("certificate", "BAD_DOCUMENT"),
        ({"certificate": good["certificate"]}, "BAD_DOCUMENT"),
    ]
    for cert, code in cases:
        await refused(api, envelope_with(api, cert, owner.worker, owner.actor), 403, code)
    await admitted(api, envelope_with(api, good, owner.worker, owner.actor))


async def test_record_author_must_be_the_certified_actor(api: Api) -> None:
    owner, peer = api.founding.participants["owner"], api.founding.participants["peer"]
    env = envelope_with(api, owner.certificate, owner.worker, peer.actor)
    body = await refused(api, env, 403, "AUTHOR_NOT_CERTIFIED")
    assert body["details"] == {"author": peer.actor, "actor": owner.actor}


async def test_genesis_of_another_library_is_403(api: Api) -> None:
    other = found_library(seed=b"another library", created_at=T0)
    stray = other.enroll("owner")
    env = stray.envelope(other.genesis, space(), api.clock.tick())
    await refused(api, env, 403, "GENESIS_MISMATCH")
    # our certificate, a record naming another genesis (signed by our worker)
    owner = api.founding.participants["owner"]
    record = make_record(other.genesis.pin, owner.actor, api.clock.tick(), space())
    body = await refused(api, make_envelope(record, owner.certificate, owner.worker), 403,
                         "GENESIS_MISMATCH")
    assert body["details"]["pointer"] == "/record/genesis"


async def test_proof_is_the_workers_signature_over_the_record(api: Api) -> None:
    owner, peer = api.founding.participants["owner"], api.founding.participants["peer"]
    env = api.envelope("owner", space())
    other = api.envelope("owner", space(title="Other"))
    for proof in (peer.worker.sign(canonical(env["record"])), other["signature"]["proof"],
                  "zz" * 64, "", env["signature"]["proof"].upper()):
        bad = {"record": env["record"],
               "signature": {"certificate": owner.certificate, "proof": proof}}
        body = await refused(api, bad, 403, "PROOF_INVALID")
        assert body["details"]["worker"] == owner.worker.public_hex
    await admitted(api, env)


async def test_validity_windows_at_admission_time(api: Api) -> None:
    owner = api.founding.participants["owner"]
    now = api.clock.ms
    cases = [
        ("2026-01-01T00:00:00.000Z", "2026-05-01T00:00:00.000Z"),  # expired
        ("2026-07-01T00:00:00.000Z", FAR),  # not yet valid
    ]
    for nb, na in cases:
        cert = worker_cert(api, api.founding.authority, owner.actor, owner.worker, not_before=nb,
                           not_after=na)
        env = envelope_with(api, cert, owner.worker, owner.actor)
        body = await refused(api, env, 403, "CERTIFICATE_EXPIRED")
        assert body["details"] == {"not_before": nb, "not_after": na}
    # the edges of the window are inside it
    api.clock.ms = now
    edge = worker_cert(api, api.founding.authority, owner.actor, owner.worker,
                       not_before=api.clock.now(), not_after=api.clock.tick(0))
    record = make_record(api.founding.genesis.pin, owner.actor, api.clock.now(), space())
    await admitted(api, make_envelope(record, edge, owner.worker))


async def test_authority_certificate_must_be_valid_now(api: Api) -> None:
    f = api.founding
    later = stranger("later authority")
    until = "2040-01-01T00:00:00.000Z"
    doc = make_authority_certificate(f.genesis, later.public_hex, ["native-application"],
                                     "2027-01-01T00:00:00.000Z", until, f.roots)
    assert (await post_authority(api, doc)).status_code == 201
    owner = f.participants["owner"]
    cert = worker_cert(api, later, owner.actor, owner.worker, not_after=until)
    body = await refused(api, envelope_with(api, cert, owner.worker, owner.actor), 403,
                         "AUTHORITY_EXPIRED")
    assert body["details"]["authority"] == later.public_hex
    # past the founding authority's ten years (2036), every worker it approved stops too ...
    api.clock.ms = parse_ms("2037-01-01T00:00:00.000Z") or 0
    await refused(api, api.envelope("owner", space()), 403, "AUTHORITY_EXPIRED")
    # ... but the later authority (valid until 2040) now works
    await admitted(api, envelope_with(api, cert, owner.worker, owner.actor))


# --- revocations -------------------------------------------------------------------------------


async def test_authority_revokes_a_worker_from_its_own_sequence_on(api: Api) -> None:
    f = api.founding
    owner = f.participants["owner"]
    before_env = api.envelope("owner", space(title="Before"))
    before = await admitted(api, before_env)
    revocation = make_revocation(f.genesis, owner.worker.public_hex, "lost laptop", [f.authority])
    r = await post_authority(api, revocation)
    assert r.status_code == 201, r.text
    seq = r.json()["sequence"]
    assert seq == before["admission"]["sequence"] + 1
    again = await post_authority(api, revocation)
    assert again.status_code == 200 and again.json()["sequence"] == seq

    body = await refused(api, api.envelope("owner", space(title="After")), 403, "WORKER_REVOKED")
    assert body["details"]["worker"] == owner.worker.public_hex
    await admitted(api, api.envelope("peer", space(title="Peer is unaffected")))
    # what was admitted before stays readable and retries still answer it
    got = await api.client.get(f"/api/entries/{before['id']}")
    assert got.status_code == 200 and got.json() == before
    retry = await api.post(before_env)
    assert retry.status_code == 200 and retry.json() == before
    # the same actor continues with a new worker key
    fresh = stranger("new laptop")
    cert = worker_cert(api, f.authority, owner.actor, fresh)
    await admitted(api, envelope_with(api, cert, fresh, owner.actor))


async def test_revocations_must_be_signed_by_root_or_an_authority(api: Api) -> None:
    f = api.founding
    worker = f.participants["owner"].worker.public_hex
    for signers in ([f.log_key], [stranger("nobody")], [f.authority, f.log_key]):
        await authority_refused(api, make_revocation(f.genesis, worker, "r", signers), 403,
                                "REVOCATION_SIGNATURES")
    # an authority cannot revoke itself; root can
    await authority_refused(
        api, make_revocation(f.genesis, f.authority.public_hex, "r", [f.authority]), 403,
        "REVOCATION_SIGNATURES")
    bad = make_revocation(f.genesis, worker, "r", [f.authority])
    bad["revocation"]["reason"] = "forged after signing"
    await authority_refused(api, bad, 403, "REVOCATION_SIGNATURES")
    other = found_library(seed=b"another library", created_at=T0)
    await authority_refused(api, make_revocation(other.genesis, worker, "r", [f.authority]), 403,
                            "GENESIS_MISMATCH")
    for change, code in (
        ({"note": "x"}, "CERTIFICATE_FIELDS"), ({"key": "k"}, "CERTIFICATE_FIELDS"),
        ({"format": "alexandria.revocation/2"}, "BAD_FORMAT"),
    ):
        shaped = make_revocation(f.genesis, worker, "r", [f.authority])
        shaped["revocation"].update(change)
        await authority_refused(api, shaped, 400, code)
    await admitted(api, api.envelope("owner", space()))


async def test_a_revocation_is_signed_like_the_certificate_of_the_key(api: Api) -> None:
    """PROTOCOL §2.6: root revokes authority keys, an authority revokes worker keys; neither
    revokes the other kind, and a refused revocation is not admitted."""
    f = api.founding
    second = stranger("second authority")
    cert = make_authority_certificate(f.genesis, second.public_hex, ["native-application"],
                                      T0, FAR, f.roots)
    assert (await post_authority(api, cert)).status_code == 201
    # an authority revokes neither another authority's key nor the log key
    for key in (f.authority.public_hex, f.log_key.public_hex):
        body = await authority_refused(
            api, make_revocation(f.genesis, key, "r", [second]), 403, "REVOCATION_SIGNATURES")
        assert body["details"]["key"] == key and body["details"]["threshold"] == 1
    # root does not revoke a worker key (a key with no authority certificate)
    worker = f.participants["owner"].worker.public_hex
    body = await authority_refused(
        api, make_revocation(f.genesis, worker, "r", f.roots), 403, "REVOCATION_SIGNATURES")
    assert body["details"]["key"] == worker
    await admitted(api, api.envelope("owner", space(title="Still certified")))
    # the first authority still signs; the issuing authority revokes the worker
    assert (await post_authority(
        api, make_revocation(f.genesis, worker, "r", [f.authority]))).status_code == 201
    await refused(api, api.envelope("owner", space(title="After")), 403, "WORKER_REVOKED")
    # root revokes the second authority's key
    assert (await post_authority(
        api, make_revocation(f.genesis, second.public_hex, "r", f.roots))).status_code == 201


async def test_root_revokes_an_authority_with_the_threshold(api3: Api) -> None:
    f = api3.founding
    cert = make_authority_certificate(f.genesis, f.authority.public_hex, ["native-application"],
                                      T0, FAR, f.roots[1:])
    assert (await post_authority(api3, cert)).status_code == 201
    before = await admitted(api3, api3.envelope("owner", space(title="Before")))

    one_root = make_revocation(f.genesis, f.authority.public_hex, "compromised", f.roots[:1])
    await authority_refused(api3, one_root, 403, "REVOCATION_SIGNATURES")
    revocation = make_revocation(f.genesis, f.authority.public_hex, "compromised", f.roots[:2])
    r = await post_authority(api3, revocation)
    assert r.status_code == 201, r.text

    body = await refused(api3, api3.envelope("owner", space(title="After")), 403,
                         "AUTHORITY_REVOKED")
    assert body["details"]["authority"] == f.authority.public_hex
    # the certificate admitted before stays admitted (an exact re-post answers it), but a
    # revoked key can neither be certified again nor revoke workers
    assert (await post_authority(api3, cert)).status_code == 200
    recertified = make_authority_certificate(
        f.genesis, f.authority.public_hex, ["native-application"], T0, FAR, f.roots[:2])
    await authority_refused(api3, recertified, 403, "AUTHORITY_REVOKED")
    worker = f.participants["owner"].worker.public_hex
    await authority_refused(api3, make_revocation(f.genesis, worker, "r", [f.authority]), 403,
                            "REVOCATION_SIGNATURES")
    got = await api3.client.get(f"/api/entries/{before['id']}")
    assert got.status_code == 200 and got.json() == before
    assert before["admission"]["sequence"] < r.json()["sequence"]


def test_verified_certificates_are_remembered_by_their_genesis_only(founding: Founding) -> None:
    """The memo of verified worker certificates belongs to the ``Genesis`` it was checked
    against (no module-level state): another genesis object checks afresh, and a tampered
    document is never answered from the memo."""
    doc = founding.participants["owner"].certificate
    first = parse_worker_certificate(doc, founding.genesis)
    assert parse_worker_certificate(doc, founding.genesis) is first
    again = Genesis.from_document(founding.genesis_document, pin=founding.genesis.pin)
    assert not again.memo.certificates
    assert parse_worker_certificate(doc, again) == first
    assert parse_worker_certificate(doc, again) is not first
    tampered = copy.deepcopy(doc)
    tampered["certificate"]["scopes"] = ["library.comment"]
    with pytest.raises(AlexandriaError) as caught:
        parse_worker_certificate(tampered, founding.genesis)
    assert caught.value.code == "CERTIFICATE_SIGNATURE"
