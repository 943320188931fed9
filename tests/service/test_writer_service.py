"""The writer process of a multi-process server: admissions over its socket answer exactly as
the in-process writer does, typed errors included, and a lost writer is a typed 503."""

from __future__ import annotations

import json
import os
import pickle
import signal
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.api.status import status_of
from alexandria.core.records import PERSONAL_KINDS, PUBLIC_KINDS, RecordInvalid
from alexandria.core.trust import Genesis
from alexandria.errors import AlexandriaError, Conflict, Failed
from alexandria.rules.admission import Candidate, prepare
from alexandria.service.bootstrap import Founding
from alexandria.service.writer_service import (
    RequestDecoder,
    WriterClient,
    WriterServer,
    WriterUnavailable,
    decode_error,
    encode_error,
    encode_request,
)
from alexandria.store.backends import storage_for
from alexandria.store.interface import Admitted, DryRun
from tests.support.library import Clock
from tests.support.liveserver import NewDb, Server, serving, write_library_files
from tests.vectors import generate


def _claim(title: str, previous: str = "") -> dict[str, Any]:
    return {
        "kind": "claim", "title": title, "links": [], "previous": previous,
        "body": {"statement": title, "scope": "Tests", "assumptions": []},
    }


@pytest.mark.parametrize(
    "error",
    [
        Conflict("previous is not the current head", "HEAD_CONFLICT", head="ab" * 32, root="cd"),
        RecordInvalid("bad title", pointer="/record/title"),
        WriterUnavailable("gone"),
        Failed("storage failed", "STORAGE_FAILED"),
    ],
)
def test_errors_cross_processes_whole(error: AlexandriaError) -> None:
    again = decode_error(pickle.loads(pickle.dumps(encode_error(error))))
    assert type(again) is type(error)
    assert again.to_json() == error.to_json()
    assert status_of(again) == status_of(error)


class Setup:
    def __init__(self, founding: Founding, clock: Clock, client: WriterClient,
                 server: WriterServer) -> None:
        self.founding, self.clock, self.client, self.server = founding, clock, client, server

    def candidate(self, content: dict[str, Any]) -> Candidate:
        env = self.founding.participants["owner"].envelope(
            self.founding.genesis, content, self.clock.tick()
        )
        return prepare(json.dumps(env).encode(), self.founding.genesis)


VECTORS = Path(generate.__file__).resolve().parent


def test_candidates_cross_processes_whole() -> None:
    """Records and worker certificates travel as bytes and are rebuilt: every valid or broken
    envelope of the signed vectors (every kind, personal lists too) arrives equal to itself."""
    index = json.loads((VECTORS / "index.json").read_bytes())
    genesis = Genesis.from_document(
        json.loads((VECTORS / index["genesis"]).read_bytes()), pin=index["pin"]
    )
    crossed = 0
    decode = RequestDecoder()
    for path in sorted(VECTORS.glob("envelope_*.json")):
        try:
            cand = prepare(path.read_bytes(), genesis, PUBLIC_KINDS + PERSONAL_KINDS, True)
        except AlexandriaError:
            continue  # refused before there is a candidate
        wire = pickle.dumps(encode_request(cand, True), protocol=pickle.HIGHEST_PROTOCOL)
        again, dry_run = decode(pickle.loads(wire))
        assert dry_run is True
        assert replace(again, deferred=None) == replace(cand, deferred=None), path.name
        if cand.deferred is not None:  # the error a failed proof, scope or schema deferred
            assert again.deferred is not None
            assert type(again.deferred) is type(cand.deferred)
            assert again.deferred.to_json() == cand.deferred.to_json()
        assert again.record.raw == cand.record.raw and again.record.links == cand.record.links
        assert type(again.record.decoded_body) is type(cand.record.decoded_body)
        crossed += 1
    assert crossed >= 20
    # each distinct worker certificate is rebuilt once, then reused
    cand = prepare((VECTORS / "envelope_01_space.json").read_bytes(), genesis)
    first, _ = decode(encode_request(cand, False))
    second, _ = decode(encode_request(cand, False))
    assert first.certificate is second.certificate


@pytest.fixture
async def setup(tmp_path: Path, founding: Founding, clock: Clock, db: Path | str
                ) -> AsyncIterator[Setup]:
    storage = storage_for(db, founding.genesis)
    storage.clock = clock
    await storage.open()
    for doc in founding.authority_documents():
        await storage.admit_authority(doc)
    server = WriterServer(storage.submit, tmp_path / "writer.sock")
    await server.start()
    client = WriterClient(tmp_path / "writer.sock")
    await client.connect()
    try:
        yield Setup(founding, clock, client, server)
    finally:
        await client.close()
        await server.close(drain=1)
        await storage.close()


async def test_admissions_through_the_writer_socket(setup: Setup) -> None:
    first = setup.candidate(_claim("First"))
    created = await setup.client.admit(first)
    assert isinstance(created, Admitted) and created.created
    retry = await setup.client.admit(first)
    assert isinstance(retry, Admitted) and not retry.created and retry.signed == created.signed
    dry = await setup.client.admit(setup.candidate(_claim("Second", created.id)), dry_run=True)
    assert isinstance(dry, DryRun) and dry.root == created.id and not dry.admitted
    await setup.client.admit(setup.candidate(_claim("Second", created.id)))
    with pytest.raises(Conflict) as refused:
        await setup.client.admit(setup.candidate(_claim("Stale", created.id)))
    assert refused.value.code == "HEAD_CONFLICT" and refused.value.details["root"] == created.id


async def test_a_lost_writer_is_a_typed_503(setup: Setup) -> None:
    await setup.client.admit(setup.candidate(_claim("Before")))
    await setup.server.close(drain=0)
    # the server stops listening but the connection is up: closing it is what the worker sees
    await setup.client.close()
    with pytest.raises(WriterUnavailable) as lost:
        await setup.client.admit(setup.candidate(_claim("After")))
    assert status_of(lost.value) == 503


@pytest.mark.parametrize(
    ("workers", "extra"), [(2, ()), (1, ("--writer-process",))], ids=["workers-2", "writer"]
)
def test_a_multi_process_server_admits_through_its_writer(
    tmp_path: Path, founding: Founding, workers: int, extra: tuple[str, ...], new_db: NewDb
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    owner = founding.participants["owner"]
    with (
        serving(genesis, new_db(tmp_path / "library.db"), log_key, workers, extra) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        for doc in founding.authority_documents():
            assert http.post("/api/authority", json=doc).status_code == 201
        env = owner.envelope(founding.genesis, _claim("Served"), "2026-01-01T00:00:01.000Z")
        body = json.dumps(env).encode()
        first = http.post("/api/entries", content=body)
        assert first.status_code == 201, first.text
        assert http.post("/api/entries", content=body).content == first.content
        rev = first.json()["id"]
        for _ in range(6):  # whichever worker answers, it reads what the writer committed
            assert http.get(f"/api/entries/{rev}").content == first.content
        bad = dict(env, signature={**env["signature"], "proof": "00" * 64})
        refused = http.post("/api/entries", content=json.dumps(bad).encode())
        assert refused.status_code == 403 and refused.json()["code"] == "PROOF_INVALID"


def test_a_server_whose_writer_dies_stops_and_says_why(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    server = Server(genesis, new_db(tmp_path / "library.db"), log_key,
                    extra=("--writer-process",))
    try:
        children = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children")
        writers = [
            int(pid) for pid in children.read_text().split()
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(writers) == 1
        os.kill(writers[0], signal.SIGKILL)
        assert server.proc.wait(timeout=20) == 1  # an unexpected stop: restart on failure
        assert server.proc.stderr is not None
        assert "admission writer process exited" in server.proc.stderr.read().decode()
    finally:
        server.stop()


def _listen_later(path: str, delay: float) -> None:
    import socket
    import time

    time.sleep(delay)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        time.sleep(30)


def test_the_workers_wait_for_the_writer_to_listen(tmp_path: Path) -> None:
    """The writer opens (and may migrate) the library before it listens; the HTTP workers
    start only then (a worker opening the database under a long migration timed out on its
    write lock and the server failed to start on an upgraded 1M-entry library)."""
    import multiprocessing
    import time

    from alexandria.service.supervisor import await_writer

    path = str(tmp_path / "writer.sock")
    process = multiprocessing.get_context("spawn").Process(
        target=_listen_later, args=(path, 1.5)
    )
    started = time.monotonic()
    process.start()
    try:
        await_writer(process, path)
        waited = time.monotonic() - started
        assert waited >= 1.5 and process.is_alive()
    finally:
        process.kill()
        process.join()
    # a writer that dies while opening: no wait beyond its exit
    dead = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0.2,))
    dead.start()
    await_writer(dead, str(tmp_path / "never.sock"))
    assert not dead.is_alive()
