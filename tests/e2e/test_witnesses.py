"""End to end on 127.0.0.1: a library and two witnesses (real ``alexandria serve`` and
``alexandria witness serve`` processes), a library that tries to fork, and the verifiers."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import orjson
import pytest

from alexandria.api.mcp.checks import Checked, Verifier
from alexandria.api.mcp.source import ClientSource
from alexandria.client import Client
from alexandria.core import note
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.core.tlog_witness import format_add_checkpoint
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.service.bootstrap import Founding, found_library
from alexandria.service.witness import init_witness_dir
from tests.support.library import SEED, T0
from tests.support.liveserver import NewDb, Server, serving, write_library_files
from tests.support.witness import WitnessProcess

pytestmark = pytest.mark.slow


@dataclass
class Witnesses:
    processes: list[WitnessProcess]
    verifiers: list[note.Verifier]

    def library_options(self) -> tuple[str, ...]:
        out: list[str] = []
        for p, v in zip(self.processes, self.verifiers, strict=True):
            out += ["--witness", f"{v.name}={p.url}+{v.vkey}"]
        return (*out, "--witness-quorum", "2")

    def verifier_options(self) -> list[str]:
        out: list[str] = []
        for v in self.verifiers:
            out += ["--witness", f"{v.name}={v.vkey}"]
        return [*out, "--witness-quorum", "2"]

    @property
    def policy(self) -> WitnessPolicy:
        return WitnessPolicy(tuple(self.verifiers), 2)


def alexandria(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "alexandria.cli", *args], capture_output=True,
                          timeout=120)


def publish(server: Server, founding: Founding, titles: list[str], authorities: bool = True
            ) -> list[str]:
    """Discussions titled ``titles`` by the owner (after the authority documents, unless the
    library has them already); their ids."""
    owner = founding.enroll("owner")
    ids = []
    with httpx.Client(base_url=server.url) as c:
        for doc in founding.authority_documents() if authorities else ():
            assert c.post("/api/authority", json=doc).status_code == 201
        for title in titles:
            content = {"kind": "discussion", "title": title, "body": {"text": "t"},
                       "links": [], "previous": ""}
            r = c.post("/api/entries",
                       json=owner.envelope(founding.genesis, content, format_ms(now_ms() - 1000)))
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
    return ids


def wait_cosigned(server: Server, policy: WitnessPolicy, size: int, timeout: float = 30) -> str:
    """The served checkpoint, once it covers ``size`` and carries the policy's quorum."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = httpx.get(f"{server.url}/api/log/checkpoint").text
        cp, _sigs = parse_checkpoint(text)
        if cp.size >= size and len(policy.cosigners(text)) >= policy.quorum:
            return text
        time.sleep(0.2)
    raise AssertionError(f"no cosigned checkpoint of size {size} within {timeout} s: {text}")


@pytest.fixture
def witnesses(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Witnesses]:
    """Two witnesses of their own for each test: a witness remembers the log it cosigned, and
    the same library on the other backend is, to it, a fork."""
    tmp = tmp_path_factory.mktemp("witnesses")
    founding = found_library(seed=SEED, created_at=T0)
    origin = founding.genesis.origin
    log_vkey = note.Verifier(origin, note.ED25519, founding.log_key.public_bytes).vkey
    verifiers, processes = [], []
    try:
        for name in ("witness.example/w1", "witness.example/w2"):
            identity = init_witness_dir(tmp / name.replace("/", "_"), name)
            verifiers.append(identity.verifier)
            processes.append(WitnessProcess(tmp / name.replace("/", "_"),
                                            [f"{origin}={log_vkey}"]))
        yield Witnesses(processes, verifiers)
    finally:
        for p in processes:
            p.stop()


def test_two_witnesses_cosign_and_a_fork_is_refused_by_both(
    witnesses: Witnesses, tmp_path: Path, new_db: NewDb,
) -> None:
    founding = found_library(seed=SEED, created_at=T0)
    genesis, log_key = write_library_files(founding, tmp_path / "files")
    pin = founding.genesis.pin
    policy = witnesses.policy
    honest_db, fork_db = new_db(tmp_path / "honest.db"), new_db(tmp_path / "fork.db")
    with serving(genesis, honest_db, log_key, extra=witnesses.library_options()) as honest:
        ids = publish(honest, founding, ["one", "two", "three"])
        size = len(founding.authority_documents()) + len(ids)
        first = wait_cosigned(honest, policy, size)
        assert parse_checkpoint(first)[0].size == size
        # the log grows: the next checkpoint goes with a consistency proof from `size`
        ids += publish(honest, founding, ["four"], authorities=False)
        served = wait_cosigned(honest, policy, size + 1)
        cp, sigs = parse_checkpoint(served)
        assert cp.size == size + 1
        # the log's signature first, then both cosignatures, as one note
        assert len(sigs) == 3
        assert {c.verifier.name for c in policy.cosigners(served)} == {
            "witness.example/w1", "witness.example/w2"}
        page = httpx.get(f"{honest.url}/api/log/checkpoints").json()["checkpoints"]
        assert page[-1]["note"] == served
        # the verifiers with the policy accept it
        r = alexandria("verify", "--genesis-pin", pin, "--url", honest.url,
                       *witnesses.verifier_options())
        assert r.returncode == 0, r.stderr
        assert b"cosigned by 2 trusted witnesses" in r.stdout
        r = alexandria("--json", "verify", "--genesis-pin", pin, "--url", honest.url,
                       "--entry", ids[-1], *witnesses.verifier_options())
        assert r.returncode == 0, r.stderr
        assert len(orjson.loads(r.stdout)["cosigners"]) == 2
        # an agent's MCP verify with the same policy reports both cosigners
        checked = mcp_verify(honest, founding, policy, ids[-1])
        assert checked.verdicts[0].verified
        view = checked.checkpoint_json()
        assert view is not None
        assert sorted(view["cosigned_by"]) == ["witness.example/w1", "witness.example/w2"]
        export = tmp_path / "honest.jsonl"
        assert alexandria("export", "--db", str(honest_db), "--output", str(export)
                          ).returncode == 0
    # the export from the database carries the cosignatures too
    r = alexandria("verify", "--genesis-pin", pin, str(export), *witnesses.verifier_options())
    assert r.returncode == 0, r.stderr
    final = cp.size

    # The fork: another database, the same genesis and log key, other entries, same size.
    # A copy of the key file elsewhere: an honest server refuses to sign behind the checkpoint
    # it published (LOG_KEY.published, beside its key file); a forking one would not keep it.
    genesis, log_key = write_library_files(founding, tmp_path / "fork-files")
    with serving(genesis, fork_db, log_key, extra=witnesses.library_options()) as fork:
        publish(fork, founding, ["un", "deux", "trois", "quatre"])
        forked = httpx.get(f"{fork.url}/api/log/checkpoint").text
        fcp, _ = parse_checkpoint(forked)
        assert fcp.size == final and fcp.root != cp.root
        # both witnesses refuse it: 409 at the size they hold, whichever old size is sent
        for process in witnesses.processes:
            for old in (0, final):
                r = httpx.post(f"{process.url}/add-checkpoint",
                               content=format_add_checkpoint(old, [], forked))
                assert (r.status_code, r.content) == (409, f"{final}\n".encode())
        time.sleep(3)  # the fork's own witness tasks have tried and been refused
        forked = httpx.get(f"{fork.url}/api/log/checkpoint").text
        assert policy.cosigners(forked) == []
        # a verifier with the policy refuses the forked checkpoint, naming it
        r = alexandria("--json", "verify", "--genesis-pin", pin, "--url", fork.url,
                       *witnesses.verifier_options())
        assert r.returncode == 6  # verification failed (docs/cli.md)
        error = orjson.loads(r.stdout)
        assert error["code"] == "CHECKPOINT_NOT_WITNESSED"
        assert error["details"]["size"] == final
        r = alexandria("verify", "--genesis-pin", pin, "--url", fork.url,
                       *witnesses.verifier_options())
        assert r.returncode == 6 and b"CHECKPOINT_NOT_WITNESSED" in r.stderr
        # without the policy the fork verifies: only witnesses can tell
        assert alexandria("verify", "--genesis-pin", pin, "--url", fork.url).returncode == 0
        # the MCP verify tool with the policy says why it is not verified
        forked_id = httpx.get(f"{fork.url}/api/catalogue", params={"q": "quatre"}
                              ).json()["items"][0]["id"]
        checked = mcp_verify(fork, founding, policy, forked_id)
        assert not checked.verdicts[0].verified
        assert checked.checkpoint_json() == {"verified": False, "failure": {
            **(checked.checkpoint_failure or {}), "code": "CHECKPOINT_NOT_WITNESSED"}}
        assert mcp_verify(fork, founding, None, forked_id).verdicts[0].verified


def mcp_verify(server: Server, founding: Founding, policy: WitnessPolicy | None,
               revision: str) -> Checked:
    """What the MCP ``verify`` tool checks of one revision, under a witness policy."""
    client = Client(server.url)
    try:
        signed = orjson.loads(client.request("GET", f"/api/entries/{revision}").content)
        verifier = Verifier(ClientSource(client), founding.genesis, policy)
        return anyio.run(verifier.check, [signed], True)
    finally:
        client.close()


def test_an_unreachable_witness_delays_nothing(tmp_path: Path, new_db: NewDb) -> None:
    """A witness that does not answer: admissions and checkpoints go on, the other witness
    cosigns, and the served checkpoint falls back to the newest (quorum 2 never reached)."""
    founding = found_library(seed=SEED, created_at=T0)
    genesis, log_key = write_library_files(founding, tmp_path / "files")
    origin = founding.genesis.origin
    log_vkey = note.Verifier(origin, note.ED25519, founding.log_key.public_bytes).vkey
    live = init_witness_dir(tmp_path / "w", "witness.example/live").verifier
    process = WitnessProcess(tmp_path / "w", [f"{origin}={log_vkey}"])
    dead = note.Verifier("witness.example/dead", note.COSIGNATURE_V1, bytes(range(32)))
    options = ("--witness", f"{live.name}={process.url}+{live.vkey}",
               "--witness", f"{dead.name}=http://127.0.0.1:9+{dead.vkey}",
               "--witness-quorum", "2")
    try:
        with serving(genesis, new_db(tmp_path / "lib.db"), log_key, extra=options) as server:
            started = time.time()
            ids = publish(server, founding, ["a", "b"])
            assert time.time() - started < 10
            one = WitnessPolicy((live,), 1)
            size = len(founding.authority_documents()) + len(ids)
            served = wait_cosigned(server, one, size)
            assert [c.verifier.name for c in one.cosigners(served)] == [live.name]
    finally:
        process.stop()
