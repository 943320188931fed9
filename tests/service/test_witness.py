"""The witness (C2SP tlog-witness) through its HTTP app: every answer the spec defines, the
bounds, and the durability of its record (a SIGKILL right after cosigning)."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from alexandria.api.witness import create_witness_app
from alexandria.cli import main
from alexandria.core import note
from alexandria.core.tlog_witness import MAX_BODY_BYTES, format_add_checkpoint
from alexandria.errors import Conflict
from alexandria.service.witness import (
    STATE_FILE,
    Witness,
    init_witness_dir,
    load_witness_dir,
)
from alexandria.store.witness_state import WitnessState
from tests.support.witness import ToyLog, WitnessProcess

NOW = 1_780_000_000


@pytest.fixture
def toy() -> ToyLog:
    return ToyLog().append(*(b"leaf %d" % i for i in range(5)))


@pytest.fixture
async def witness(tmp_path: Path, toy: ToyLog) -> AsyncIterator[tuple[httpx.AsyncClient, Witness]]:
    identity = init_witness_dir(tmp_path / "w", "witness.example/w1")
    w = Witness(identity, {toy.origin: [toy.verifier]},
                WitnessState(tmp_path / "w" / STATE_FILE), clock=lambda: NOW)
    app = create_witness_app(w)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://witness") as client:
        yield client, w
    w.state.close()


async def add(client: httpx.AsyncClient, body: bytes) -> httpx.Response:
    return await client.post("/add-checkpoint", content=body)


def cosigner(w: Witness) -> note.Verifier:
    return w.identity.verifier


async def test_first_checkpoint_is_cosigned(witness: tuple[httpx.AsyncClient, Witness],
                                            toy: ToyLog) -> None:
    client, w = witness
    r = await add(client, toy.request(0))
    assert r.status_code == 200, r.text
    signed = toy.checkpoint() + r.text
    [good] = note.verified(note.parse_note(signed), [cosigner(w)])
    assert good.timestamp == NOW
    assert w.state.latest(toy.origin) is not None


async def test_consistent_growth_and_resubmission(witness: tuple[httpx.AsyncClient, Witness],
                                                  toy: ToyLog) -> None:
    client, w = witness
    assert (await add(client, toy.request(0, 3))).status_code == 200
    assert (await add(client, toy.request(3, 5))).status_code == 200
    # the same checkpoint again (old == size, same root): cosigned again
    assert (await add(client, toy.request(5, 5))).status_code == 200
    latest = w.state.latest(toy.origin)
    assert latest is not None and latest.size == 5 and latest.root == toy.root()


async def test_409_old_size_mismatch_says_the_size(witness: tuple[httpx.AsyncClient, Witness],
                                                   toy: ToyLog) -> None:
    client, _w = witness
    assert (await add(client, toy.request(0, 3))).status_code == 200
    r = await add(client, toy.request(0, 5))
    assert r.status_code == 409
    assert r.content == b"3\n"
    assert r.headers["content-type"] == "text/x.tlog.size"
    r = await add(client, toy.request(2, 5))
    assert (r.status_code, r.content) == (409, b"3\n")


async def test_409_same_size_other_root(witness: tuple[httpx.AsyncClient, Witness],
                                        toy: ToyLog) -> None:
    client, _w = witness
    assert (await add(client, toy.request(0))).status_code == 200
    fork = ToyLog().append(*(b"other %d" % i for i in range(5)))
    r = await add(client, fork.request(5))
    assert (r.status_code, r.content) == (409, b"5\n")


async def test_422_bad_proof(witness: tuple[httpx.AsyncClient, Witness], toy: ToyLog) -> None:
    client, w = witness
    assert (await add(client, toy.request(0, 3))).status_code == 200
    fork = ToyLog().append(*(b"other %d" % i for i in range(5)))
    r = await add(client, fork.request(3))  # a proof from the fork's own size 3
    assert r.status_code == 422
    assert r.json()["code"] == "WITNESS_PROOF_INVALID"
    # a proof when the old size is 0
    w2 = ToyLog("example.org/other")
    w.logs[w2.origin] = (w2.verifier,)
    w2.append(b"a", b"b")
    body = format_add_checkpoint(0, [bytes(32)], w2.checkpoint())
    assert (await add(client, body)).status_code == 422
    # the record did not move
    latest = w.state.latest(toy.origin)
    assert latest is not None and latest.size == 3


async def test_404_unknown_origin(witness: tuple[httpx.AsyncClient, Witness]) -> None:
    client, _w = witness
    stranger = ToyLog("example.org/stranger").append(b"x")
    r = await add(client, stranger.request(0))
    assert r.status_code == 404 and r.json()["code"] == "WITNESS_UNKNOWN_LOG"


async def test_403_not_signed_by_a_trusted_key(witness: tuple[httpx.AsyncClient, Witness],
                                               toy: ToyLog) -> None:
    client, _w = witness
    impostor = ToyLog(toy.origin, seed=9).append(b"x")  # same origin, another key
    r = await add(client, impostor.request(0))
    assert r.status_code == 403
    # the trusted key's name and key id over a signature that does not verify
    signed = note.parse_note(toy.checkpoint())
    forged = note.Note(signed.text, (note.Signature(toy.origin, toy.verifier.key_id,
                                                    bytes(64)),))
    r = await add(client, format_add_checkpoint(0, [], forged.render()))
    assert r.status_code == 403


async def test_unknown_extra_signatures_are_ignored(
    witness: tuple[httpx.AsyncClient, Witness], toy: ToyLog,
) -> None:
    client, _w = witness
    other = note.signature_line(note.parse_note(toy.checkpoint()).text, "someone.else",
                                note.parse_signer_key(note.format_signer_key(
                                    "someone.else", note.ED25519, ToyLog(seed=3).key))[1])
    r = await add(client, format_add_checkpoint(0, [], toy.checkpoint() + other.line()))
    assert r.status_code == 200


@pytest.mark.parametrize("body", [
    b"old 0\n",  # no blank line, no checkpoint
    b"old 01\n\nx\n",  # leading zero
    b"new 0\n\nx\n",
    b"old 0\nnot-base64\n\nx\n",
])
async def test_400_malformed_body(witness: tuple[httpx.AsyncClient, Witness],
                                  body: bytes) -> None:
    client, _w = witness
    assert (await add(client, body)).status_code == 400


async def test_400_malformed_checkpoint_and_old_size_above(
    witness: tuple[httpx.AsyncClient, Witness], toy: ToyLog,
) -> None:
    client, _w = witness
    r = await add(client, b"old 0\n\n" + toy.checkpoint().encode().replace(b"\n\n", b"\n"))
    assert r.status_code == 400
    r = await add(client, format_add_checkpoint(9, [], toy.checkpoint()))
    assert r.status_code == 400 and r.json()["code"] == "WITNESS_OLD_SIZE_TOO_LARGE"


async def test_bounds(witness: tuple[httpx.AsyncClient, Witness], toy: ToyLog) -> None:
    client, _w = witness
    r = await add(client, b"old 0\n" + b"A" * MAX_BODY_BYTES)
    assert r.status_code == 413
    r = await add(client, format_add_checkpoint(3, [bytes(32)] * 64, toy.checkpoint()))
    assert r.status_code == 400 and "proof lines" in r.json()["error"]
    many = toy.checkpoint() + "".join(
        note.Signature(f"k{i}", bytes(4), bytes(64)).line() for i in range(16))
    r = await add(client, format_add_checkpoint(0, [], many))
    assert r.status_code == 400 and "signature lines" in r.json()["error"]
    r = await client.get("/add-checkpoint")
    assert r.status_code == 405


def test_init_key_file_mode_and_refuses_twice(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "w"
    assert main(["witness", "init", "--dir", str(d), "--name", "witness.example/w1"]) == 0
    vkey = capsys.readouterr().out.strip()
    assert note.parse_vkey(vkey).key_type == note.COSIGNATURE_V1
    assert stat.S_IMODE(os.stat(d / "witness.key").st_mode) == 0o600
    assert load_witness_dir(d).verifier.vkey == vkey
    with pytest.raises(Conflict):
        init_witness_dir(d, "witness.example/w1")
    assert main(["witness", "init", "--dir", str(tmp_path / "x"), "--name", "bad name"]) == 1


def test_sigkill_after_cosigning_never_cosigns_a_conflicting_checkpoint(
    tmp_path: Path, toy: ToyLog,
) -> None:
    """The record is durable before the cosignature leaves: a witness killed with SIGKILL
    right after answering refuses, once restarted, a different checkpoint of the same size and
    one that does not extend the cosigned tree."""
    d = tmp_path / "w"
    init_witness_dir(d, "witness.example/w1")
    logs = [f"{toy.origin}={toy.verifier.vkey}"]
    fork = ToyLog().append(*(b"other %d" % i for i in range(9)))
    for _round in range(3):
        w = WitnessProcess(d, logs)
        try:
            r = httpx.post(f"{w.url}/add-checkpoint", content=toy.request(
                0 if _round == 0 else toy.size - 1), timeout=10)
            assert r.status_code == 200, r.text
        finally:
            w.kill()  # SIGKILL: no shutdown handler, no further commit
        w = WitnessProcess(d, logs)
        try:
            size = toy.size
            r = httpx.post(f"{w.url}/add-checkpoint", content=fork.request(size, size),
                           timeout=10)
            assert (r.status_code, r.content) == (409, f"{size}\n".encode())
            r = httpx.post(f"{w.url}/add-checkpoint", content=fork.request(size, 9),
                           timeout=10)
            assert r.status_code == 422
        finally:
            w.kill()
        toy.append(b"more %d" % _round)


def test_witness_options_parse_and_refuse() -> None:
    from alexandria.core.witness_policy import (
        WitnessPolicy,
        parse_witness_endpoint,
        parse_witness_option,
    )
    from alexandria.errors import Malformed

    v = note.Verifier("w.example/a+b".replace("+", "-"), note.COSIGNATURE_V1, bytes(range(32)))
    url, got = parse_witness_endpoint(f"{v.name}=http://127.0.0.1:8090/p+x/+{v.vkey}")
    assert (url, got) == ("http://127.0.0.1:8090/p+x", v)
    assert parse_witness_option(f"{v.name}={v.vkey}") == v
    log_key = note.Verifier(v.name, note.ED25519, bytes(range(32)))
    for bad in (f"{v.name}={log_key.vkey}", f"other={v.vkey}", v.vkey, f"{v.name}=nonsense"):
        with pytest.raises(Malformed):
            parse_witness_option(bad)
    with pytest.raises(Malformed):
        parse_witness_endpoint(f"{v.name}=ftp://x+{v.vkey}")
    with pytest.raises(Malformed):
        WitnessPolicy((v,), 2)
