"""The /api/log routes through the real app: checkpoint, entries, proofs, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.core.keys import SigningKey
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.core.trust import make_authority_certificate, make_revocation
from alexandria.reads import log
from alexandria.rules.admission import prepare
from alexandria.service.bootstrap import Founding
from alexandria.service.checkpoint_signer import CheckpointSigner, background_signer
from alexandria.service.library import Library
from alexandria.store.backends import storage_for
from tests.support.library import Api, Clock, serve_library
from tests.support.log import checkpoint, discussion, publish_many


async def all_entries(api: Api, start: int, end: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    nxt: int | None = start
    while nxt is not None:
        r = await api.client.get("/api/log/entries", params={"start": nxt, "end": end})
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["entries"], "at least one entry per page"
        out += page["entries"]
        nxt = page["next"]
        assert nxt is None or nxt == start + len(out)
    return out


async def test_checkpoint_covers_the_whole_log_and_matches_the_leaves(api: Api) -> None:
    await publish_many(api, 12)
    size, root, note = await checkpoint(api)
    assert size == await api.library.storage.log_size() == 14
    assert note.startswith(f"{api.founding.genesis.origin}\n14\n")
    entries = await all_entries(api, 0, size)
    assert [e["sequence"] for e in entries] == list(range(1, 15))
    assert [e["type"] for e in entries[:2]] == ["certificate", "certificate"]
    assert {e["type"] for e in entries[2:]} == {"contribution"}
    # the leaf's bytes are its canonical form: they hash to the signed root
    leaves = [merkle.leaf_hash(canonical(e["leaf"])) for e in entries]
    assert merkle.root_from_leaves(leaves) == root
    # the same checkpoint is served again while the log does not grow
    assert (await checkpoint(api))[2] == note


async def test_entries_are_served_as_stored_bytes(api: Api) -> None:
    signed = await api.publish("owner", discussion(0))
    r = await api.client.get("/api/log/entries", params={"start": 2, "end": 3})
    body = r.content
    assert body == canonical(r.json()), "the page is canonical JSON"
    entry = r.json()["entries"][0]
    assert set(entry) == {"leaf", "sequence", "type"}
    assert entry["leaf"] == {
        "admitted_at": signed["admission"]["admitted_at"],
        "document": {"record": signed["record"], "signature": signed["signature"]},
    }
    assert entry["sequence"] == signed["admission"]["sequence"] == 3
    assert r.json()["next"] is None


async def test_a_leaf_is_recomputed_from_its_signed_record_alone(api: Api) -> None:
    """PROTOCOL §7: leaf = JCS({admitted_at, document}); from ``GET /api/entries/{id}`` alone
    a reader rebuilds the leaf, and its inclusion proof verifies against the signed root."""
    for i in range(4):
        await api.publish("owner", discussion(i))
    signed = await api.publish("peer", discussion(9))
    size, root, _note = await checkpoint(api)
    r = await api.client.get(f"/api/entries/{signed['id']}")
    got = r.json()
    data = canonical({"admitted_at": got["admission"]["admitted_at"],
                      "document": {"record": got["record"], "signature": got["signature"]}})
    index = got["admission"]["sequence"] - 1
    proof = await api.client.get("/api/log/proof/inclusion",
                                 params={"index": index, "size": size})
    path = [bytes.fromhex(h) for h in proof.json()["proof"]]
    merkle.verify_inclusion(index, size, merkle.leaf_hash(data), path, root)
    # one millisecond later is another leaf: it does not verify
    ms = parse_ms(got["admission"]["admitted_at"])
    assert ms is not None
    later = format_ms(ms + 1)
    moved = data.replace(got["admission"]["admitted_at"].encode(), later.encode(), 1)
    with pytest.raises(merkle.MerkleError):
        merkle.verify_inclusion(index, size, merkle.leaf_hash(moved), path, root)


async def test_pages_hold_at_most_50_entries(api: Api) -> None:
    await publish_many(api, 58)
    r = await api.client.get("/api/log/entries", params={"start": 0, "end": 60})
    page = r.json()
    assert len(page["entries"]) == 50 and page["next"] == 50
    r = await api.client.get("/api/log/entries", params={"start": 50, "end": 60})
    assert len(r.json()["entries"]) == 10 and r.json()["next"] is None
    r = await api.client.get("/api/log/entries", params={"start": 5, "end": 7})
    assert [e["sequence"] for e in r.json()["entries"]] == [6, 7]


async def test_pages_hold_at_most_393216_bytes(api: Api) -> None:
    await publish_many(api, 12, "long text " * 3900)  # ~40 KB envelopes
    entries = await all_entries(api, 0, 14)
    assert len(entries) == 14
    r = await api.client.get("/api/log/entries", params={"start": 2, "end": 14})
    page = r.json()
    sizes = [len(canonical(e)) for e in page["entries"]]
    assert 1 <= len(sizes) < 12 and page["next"] == 2 + len(sizes)
    assert sum(sizes) <= log.PAGE_BYTES < sum(sizes) + 40_000


BAD_PARAMETERS = [
    ("entries", {"start": "0"}, "MISSING_PARAMETER"),
    ("entries", {"start": "0", "end": "x"}, "BAD_PARAMETER"),
    ("entries", {"start": "-1", "end": "2"}, "BAD_PARAMETER"),
    ("entries", {"start": "01", "end": "2"}, "BAD_PARAMETER"),
    ("entries", {"start": "2", "end": "2"}, "LOG_RANGE"),
    ("entries", {"start": "3", "end": "2"}, "LOG_RANGE"),
    ("entries", {"start": "0", "end": "9"}, "LOG_RANGE"),
    ("entries", {"start": "0", "end": "2", "limit": "5"}, "UNKNOWN_PARAMETER"),
    ("proof/inclusion", {"index": "0"}, "MISSING_PARAMETER"),
    ("proof/inclusion", {"index": "4", "size": "4"}, "LOG_RANGE"),
    ("proof/inclusion", {"index": "0", "size": "0"}, "LOG_RANGE"),
    ("proof/inclusion", {"index": "0", "size": "6"}, "LOG_RANGE"),
    ("proof/inclusion", {"index": "1.5", "size": "4"}, "BAD_PARAMETER"),
    ("proof/consistency", {"old": "0", "new": "3"}, "LOG_RANGE"),
    ("proof/consistency", {"old": "4", "new": "3"}, "LOG_RANGE"),
    ("proof/consistency", {"old": "2", "new": "6"}, "LOG_RANGE"),
    ("proof/consistency", {"old": "99999999999999999", "new": "3"}, "BAD_PARAMETER"),
    ("checkpoints", {"after": "x"}, "BAD_PARAMETER"),
]


async def test_malformed_or_out_of_range_parameters_are_400(api: Api) -> None:
    await publish_many(api, 3)  # 5 leaves
    for route, params, code in BAD_PARAMETERS:
        r = await api.client.get(f"/api/log/{route}", params=params)
        assert (r.status_code, r.json()["code"]) == (400, code), (route, params, r.text)


async def test_repeated_parameters_are_400(api: Api) -> None:
    r = await api.client.get("/api/log/entries?start=0&start=1&end=2")
    assert r.status_code == 400 and r.json()["code"] == "REPEATED_PARAMETER"


async def test_every_inclusion_and_consistency_proof_verifies(api: Api) -> None:
    await publish_many(api, 9)  # 11 leaves
    entries = await all_entries(api, 0, 11)
    leaves = [merkle.leaf_hash(canonical(e["leaf"])) for e in entries]
    roots = {n: merkle.root_from_leaves(leaves[:n]) for n in range(1, 12)}
    for size in range(1, 12):
        for index in range(size):
            r = await api.client.get("/api/log/proof/inclusion",
                                     params={"index": index, "size": size})
            got = r.json()
            assert (got["index"], got["size"]) == (index, size)
            proof = [bytes.fromhex(h) for h in got["proof"]]
            merkle.verify_inclusion(index, size, leaves[index], proof, roots[size])
        for old in range(1, size + 1):
            r = await api.client.get("/api/log/proof/consistency",
                                     params={"old": old, "new": size})
            proof = [bytes.fromhex(h) for h in r.json()["proof"]]
            merkle.verify_consistency(old, size, roots[old], roots[size], proof)
    # and a wrong root is refused by the same check
    r = await api.client.get("/api/log/proof/inclusion", params={"index": 3, "size": 11})
    with pytest.raises(merkle.MerkleError):
        merkle.verify_inclusion(3, 11, leaves[4], [bytes.fromhex(h) for h in r.json()["proof"]],
                                roots[11])


async def test_checkpoints_are_listed_in_order(api: Api) -> None:
    notes = []
    for _ in range(3):
        await publish_many(api, 2)
        notes.append((await checkpoint(api))[2])
    r = await api.client.get("/api/log/checkpoints")
    listed = r.json()
    assert listed == {"checkpoints": [{"note": n, "size": parse_checkpoint(n)[0].size}
                                      for n in notes], "next": None}
    assert r.content == canonical(listed)
    r = await api.client.get("/api/log/checkpoints", params={"after": 4})
    assert [c["size"] for c in r.json()["checkpoints"]] == [6, 8]


@pytest.fixture
async def bare(tmp_path: Path, db: Path | str, founding: Founding, clock: Clock
               ) -> AsyncIterator[Api]:
    """An app whose log key certificate is NOT admitted yet (only the authority's)."""
    async for api in serve_library(tmp_path, founding, clock,
                                   [founding.authority_certificate], db=db):
        yield api


async def test_an_uncertified_log_key_gives_a_typed_503_until_its_certificate_is_admitted(
    bare: Api,
) -> None:
    await bare.publish("owner", discussion(0))
    r = await bare.client.get("/api/log/checkpoint")
    assert r.status_code == 503
    err = r.json()
    assert err["code"] == "LOG_KEY_NOT_CERTIFIED"
    assert err["details"]["key"] == bare.founding.log_key.public_hex
    assert err["details"]["tree_size"] == 2 and err["details"]["checkpoint_size"] == 0
    r = await bare.client.post("/api/authority", json=bare.founding.log_certificate)
    assert r.status_code == 201
    size, _root, _note = await checkpoint(bare)
    assert size == 3


async def test_without_a_log_key_persisted_checkpoints_stay_readable(api: Api) -> None:
    await publish_many(api, 2)
    size, _root, note = await checkpoint(api)
    api.library.log_key = None
    api.library.checkpoints = CheckpointSigner(api.library)  # as after a restart without --log-key
    assert (await api.client.get("/api/log/checkpoint")).text == note
    await publish_many(api, 1)
    r = await api.client.get("/api/log/checkpoint")
    assert r.status_code == 503
    assert r.json()["code"] == "LOG_KEY_MISSING"
    assert r.json()["details"] == {"tree_size": size + 1, "checkpoint_size": size}


async def test_a_log_key_revoked_by_root_signs_no_more(api: Api) -> None:
    await publish_many(api, 1)
    await checkpoint(api)
    f = api.founding
    revocation = make_revocation(f.genesis, f.log_key.public_hex, "rotated", f.roots)
    assert (await api.client.post("/api/authority", json=revocation)).status_code == 201
    r = await api.client.get("/api/log/checkpoint")
    assert r.status_code == 503 and r.json()["code"] == "LOG_KEY_REVOKED"


async def test_an_expired_log_certificate_signs_no_more(api: Api) -> None:
    await publish_many(api, 1)
    f = api.founding
    api.clock.tick(20 * 366 * 24 * 3600 * 1000)  # beyond the certificate's ten years
    # the log grows: root certifies a new authority (no other key is valid any more)
    newcomer = SigningKey(b"n" * 32).public_hex
    cert = make_authority_certificate(f.genesis, newcomer, ["native-application"],
                                      "2040-01-01T00:00:00.000Z", "2050-01-01T00:00:00.000Z",
                                      f.roots)
    assert (await api.client.post("/api/authority", json=cert)).status_code == 201
    r = await api.client.get("/api/log/checkpoint")
    assert r.status_code == 503 and r.json()["code"] == "LOG_KEY_EXPIRED"


async def test_concurrent_requests_share_one_signature(api: Api) -> None:
    await publish_many(api, 3)
    answers = await asyncio.gather(*(api.client.get("/api/log/checkpoint") for _ in range(20)))
    assert {a.text for a in answers} == {answers[0].text}
    r = await api.client.get("/api/log/checkpoints")
    assert len(r.json()["checkpoints"]) == 1


async def test_the_background_signer_signs_at_most_once_a_second_while_the_log_grows(
    db: Path | str, founding: Founding, clock: Clock
) -> None:
    storage = storage_for(db, founding.genesis)
    storage.clock = clock
    library = Library(founding.genesis, storage, founding.log_key)
    await library.open()
    try:
        for doc in founding.authority_documents():
            await storage.admit_authority(doc)

        async def publish(i: int) -> None:
            env = founding.participants["owner"].envelope(founding.genesis, discussion(i),
                                                          clock.tick())
            await storage.admit(prepare(canonical(env), founding.genesis))

        signer = library.checkpoints
        await publish(0)
        await publish(1)
        first = await signer.tick()
        assert first is not None and first.size == 4
        assert await signer.tick() is None  # the log did not grow
        await publish(2)  # the clock moved a second since that checkpoint
        second = await signer.tick()
        assert second is not None and second.size == 5
        await publish(3)
        clock.tick(-1000)  # now less than a second after the latest checkpoint
        writes = 0
        write = storage.write

        async def counted(fn: Any, checks_first: bool = False) -> Any:
            nonlocal writes
            writes += 1
            return await write(fn, checks_first)

        storage.write = counted  # type: ignore[method-assign]
        assert await signer.tick() == second
        # a checkpoint that is not due takes no write transaction (on PostgreSQL each one
        # makes every other node's writer forget what it remembers)
        assert writes == 0
        storage.write = write  # type: ignore[method-assign]
        clock.tick(1000)
        async with background_signer(library, interval=0.05):
            await asyncio.sleep(0.3)
        rows = await storage.read(lambda conn: log.checkpoints_after(conn, 0))
        assert [c.size for c in rows] == [4, 5, 6]
    finally:
        await library.close()


async def test_a_checkpoint_another_process_just_signed_is_learnt_without_a_write(
    db: Path | str, founding: Founding, clock: Clock
) -> None:
    """Every HTTP process runs a background signer: the ones that find the latest checkpoint
    less than a second old only read it."""
    libraries = []
    for _ in range(2):
        storage = storage_for(db, founding.genesis)
        storage.clock = clock
        libraries.append(Library(founding.genesis, storage, founding.log_key))
        await libraries[-1].open()
    one, other = libraries
    try:
        for doc in founding.authority_documents():
            await one.storage.admit_authority(doc)
        env = founding.participants["owner"].envelope(founding.genesis, discussion(0),
                                                      clock.tick())
        await one.storage.admit(prepare(canonical(env), founding.genesis))
        signed = await one.checkpoints.tick()
        assert signed is not None and signed.size == 3
        heard: list[int] = []
        other.checkpoints.listeners.append(lambda c: heard.append(c.size))
        write = other.storage.write

        async def refused(fn: Any, checks_first: bool = False) -> Any:
            raise AssertionError("a checkpoint that is not due took a write transaction")

        other.storage.write = refused  # type: ignore[method-assign]
        assert await other.checkpoints.tick() == signed
        assert heard == [3]
        assert await other.checkpoints.tick() is None  # known now: not even read again
        other.storage.write = write  # type: ignore[method-assign]
    finally:
        for library in libraries:
            await library.close()


async def test_the_apps_own_task_signs_while_the_log_grows(api: Api) -> None:
    await publish_many(api, 2)
    await asyncio.sleep(1.3)  # the app's signer wakes once a second
    r = await api.client.get("/api/log/checkpoints")
    assert [c["size"] for c in r.json()["checkpoints"]] == [4]
