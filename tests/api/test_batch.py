"""``POST /api/entries/batch`` (PROTOCOL §4.1), black-box through a live ``alexandria serve``
on each backend, in one process and with a writer process: each line answered as the single
route answers it alone, in order, lines independent, limits before any work, durability."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.api.batch import CHUNK_LINES
from alexandria.core.records import revision_id
from alexandria.core.timestamps import format_ms, now_ms
from alexandria.service.bootstrap import Founding, found_library
from tests.support.library import SEED, T0
from tests.support.live import gapless_log, kill_while_streaming
from tests.support.liveserver import NewDb, Server, serving, write_library_files

NDJSON = {"content-type": "application/x-ndjson"}
_CLOCK = itertools.count()


@dataclass
class Live:
    server: Server
    founding: Founding
    client: httpx.Client

    def envelope(self, content: dict[str, Any], who: str = "owner") -> dict[str, Any]:
        at = format_ms(now_ms() - 120_000 + next(_CLOCK))
        return self.founding.participants[who].envelope(self.founding.genesis, content, at)

    def batch(self, lines: list[bytes], **params: str) -> httpx.Response:
        return self.client.post("/api/entries/batch", content=b"\n".join(lines) + b"\n",
                                headers=NDJSON, params=params)

    def results(self, lines: list[bytes], **params: str) -> list[dict[str, Any]]:
        r = self.batch(lines, **params)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/x-ndjson"
        out = [json.loads(line) for line in r.content.splitlines()]
        assert r.content.endswith(b"\n") and len(out) == len(lines)
        return out

    def single(self, line: bytes, **params: str) -> tuple[int, Any]:
        r = self.client.post("/api/entries", content=line, params=params)
        return r.status_code, r.json()


def claim(i: int, previous: str = "") -> dict[str, Any]:
    return {"kind": "claim", "title": f"Claim {i}",
            "body": {"statement": f"Statement {i}", "scope": "Everything", "assumptions": []},
            "links": [], "previous": previous}


def line(env: dict[str, Any]) -> bytes:
    return json.dumps(env).encode()


def _admit_authorities(client: httpx.Client, founding: Founding) -> None:
    for doc in founding.authority_documents():
        assert client.post("/api/authority", json=doc).status_code in (200, 201)


def _founding() -> Founding:
    founding = found_library(seed=SEED, created_at=T0)
    founding.enroll("owner")
    founding.enroll("peer")
    return founding


# workers=2: two HTTP processes hand their batches to a writer process
@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "writer-process"])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         module_db: NewDb) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("batch")
    founding = _founding()
    genesis, log_key = write_library_files(founding, tmp)
    with serving(genesis, module_db(tmp / "lib.db"), log_key, request.param) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        _admit_authorities(client, founding)
        yield Live(server, founding, client)


def test_a_later_line_revises_and_links_to_an_earlier_one(live: Live) -> None:
    topic = {"kind": "discussion", "title": "Topic", "body": {"text": "t"}, "links": [],
             "previous": ""}
    first = live.envelope(topic)
    first_id = revision_id(first["record"])
    second = live.envelope({**topic, "title": "Topic, revised", "previous": first_id})
    reply = live.envelope({"kind": "reply", "title": "On claim 1", "body": "yes",
                           "links": [{"relation": "replies_to", "target": first_id}],
                           "previous": ""}, who="peer")
    results = live.results([line(first), line(second), line(reply)])
    assert [r["status"] for r in results] == [201, 201, 201], results[2]
    assert [r["body"]["id"] for r in results] == [first_id, revision_id(second["record"]),
                                                   revision_id(reply["record"])]
    sequences = [r["body"]["admission"]["sequence"] for r in results]
    assert sequences == sorted(sequences)
    # each body is the signed record the single route serves, byte for byte
    for r in results:
        served = live.client.get(f"/api/entries/{r['body']['id']}")
        assert served.json() == r["body"]
    head = live.client.get(f"/api/entries/{first_id}/head").json()
    assert head["id"] == revision_id(second["record"])


def test_lines_are_admitted_in_order_across_the_chunks_handed_to_the_writer(
        live: Live) -> None:
    """A batch is prepared and handed to the writer in chunks (``CHUNK_LINES``) that overlap;
    a chain of revisions longer than several chunks, each line revising the one before, with
    refused lines among them, is admitted in line order all the same."""
    envs = [live.envelope({"kind": "discussion", "title": "Chain 0", "body": {"text": "0"},
                           "links": [], "previous": ""})]
    for i in range(1, 3 * CHUNK_LINES + 5):
        envs.append(live.envelope({"kind": "discussion", "title": f"Chain {i}",
                                   "body": {"text": str(i)}, "links": [],
                                   "previous": revision_id(envs[-1]["record"])}))
    lines = [line(env) for env in envs]
    refused = (CHUNK_LINES - 1, 2 * CHUNK_LINES + 3)
    for at in refused:
        lines.insert(at, b"{}")
    results = live.results(lines)
    assert [i for i, r in enumerate(results) if r["status"] != 201] == list(refused)
    admitted = [r["body"] for r in results if r["status"] == 201]
    assert [b["id"] for b in admitted] == [revision_id(e["record"]) for e in envs]
    sequences = [b["admission"]["sequence"] for b in admitted]
    assert sequences == sorted(sequences)
    head = live.client.get(f"/api/entries/{admitted[0]['id']}/head").json()
    assert head["id"] == admitted[-1]["id"]


def test_a_refused_line_fails_alone(live: Live) -> None:
    good = [live.envelope(claim(10 + i)) for i in range(3)]
    forged = live.envelope(claim(20))
    forged["proof"] = "00" * 64
    nested = b"[" * 30_000 + b"]" * 30_000
    lines = [line(good[0]), line(forged), nested, b"\xff\xfe not utf-8", b"",
             line(good[1]), b"{}", line(good[2])]
    results = live.results(lines)
    assert [r["status"] for r in results][:1] == [201]
    assert results[5]["status"] == 201 and results[7]["status"] == 201
    # every refused line gets exactly what the single route answers for it alone
    for i in (1, 2, 3, 4, 6):
        status, body = live.single(lines[i])
        assert (results[i]["status"], results[i]["body"]) == (status, body), i
        assert status in (400, 403), (i, body)
    assert results[4]["body"]["code"] == "NOT_JSON"  # a blank line: the single route's 400
    assert results[2]["body"]["code"] == "JSON_TOO_DEEP"


def test_a_conflict_in_a_batch_is_the_single_routes_409(live: Live) -> None:
    root = live.envelope(claim(30))
    root_id = revision_id(root["record"])
    a = live.envelope(claim(31, previous=root_id))
    b = live.envelope(claim(32, previous=root_id))
    results = live.results([line(root), line(a), line(b)])
    assert [r["status"] for r in results] == [201, 201, 409]
    assert results[2]["body"]["code"] == "HEAD_CONFLICT"
    assert results[2]["body"]["details"]["head"] == revision_id(a["record"])
    status, body = live.single(line(b))
    assert (status, body) == (409, results[2]["body"])


def test_an_exact_retry_of_a_whole_batch_is_200_for_every_line(live: Live) -> None:
    lines = [line(live.envelope(claim(40 + i))) for i in range(5)]
    first = live.results(lines)
    assert [r["status"] for r in first] == [201] * 5
    again = live.results(lines)
    assert [r["status"] for r in again] == [200] * 5
    assert [r["body"] for r in again] == [r["body"] for r in first]
    # and the same line twice in one batch: the second is an exact retry
    dup = line(live.envelope(claim(49)))
    assert [r["status"] for r in live.results([dup, dup])] == [201, 200]


def test_dry_run_applies_to_every_line_and_admits_nothing(live: Live) -> None:
    fresh = live.envelope(claim(50))
    known = live.envelope(claim(51))
    assert live.single(line(known))[0] == 201
    size = live.client.get("/api/log/entries", params={"start": 0, "end": 1}).status_code
    assert size == 200
    results = live.results([line(fresh), line(known), b"nope"], dry_run="true")
    assert [r["status"] for r in results] == [200, 200, 400]
    assert results[0]["body"] == live.single(line(fresh), dry_run="true")[1]
    assert results[0]["body"]["already_admitted"] is False
    assert results[1]["body"]["already_admitted"] is True
    assert live.client.get(f"/api/entries/{revision_id(fresh['record'])}").status_code == 404


def test_an_empty_batch_is_an_empty_answer(live: Live) -> None:
    r = live.client.post("/api/entries/batch", content=b"", headers=NDJSON)
    assert (r.status_code, r.content) == (200, b"")


def _log_size(live: Live) -> int:
    return int(live.client.get("/api/log/checkpoint").text.splitlines()[1])


@pytest.mark.parametrize(("body", "code"), [
    (b"{}\n" * 1001, "TOO_MANY_LINES"),
    (b"{}\n" * 1000 + b"{}", "TOO_MANY_LINES"),
    (b"x" * 65_537 + b"\n{}\n", "LINE_TOO_LARGE"),
    (b"{}\n" + b"x" * 65_537, "LINE_TOO_LARGE"),
    ((b"x" * 60_000 + b"\n") * 140, "BODY_TOO_LARGE"),
])
def test_limits_are_413_for_the_whole_request(live: Live, body: bytes, code: str) -> None:
    before = _log_size(live)
    r = live.client.post("/api/entries/batch", content=body, headers=NDJSON)
    assert r.status_code == 413, r.text
    assert r.json()["code"] == code
    # streamed without a length: counted while it arrives
    r = live.client.post("/api/entries/batch", content=iter([body[:70_000], body[70_000:]]),
                         headers=NDJSON)
    assert r.status_code == 413 and r.json()["code"] == code
    assert _log_size(live) == before


def test_a_valid_batch_at_the_limits_is_answered(live: Live) -> None:
    r = live.client.post("/api/entries/batch", content=b"{}\n" * 1000, headers=NDJSON)
    assert r.status_code == 200
    assert len(r.content.splitlines()) == 1000
    r = live.client.post("/api/entries/batch", content=b"x" * 65_536, headers=NDJSON)
    assert r.status_code == 200 and json.loads(r.content)["status"] == 400


def test_a_declared_length_beyond_8_mib_is_refused_before_the_body(live: Live) -> None:
    with socket.create_connection(("127.0.0.1", live.server.port), timeout=10) as sock:
        sock.sendall(b"POST /api/entries/batch HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/x-ndjson\r\nContent-Length: 8388609\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(body)["details"] == {"limit": 8 * 1024 * 1024, "actual": 8388609}


@pytest.mark.parametrize("ctype", [None, "application/json", "text/plain"])
def test_another_content_type_is_415(live: Live, ctype: str | None) -> None:
    headers = {} if ctype is None else {"content-type": ctype}
    env = line(live.envelope(claim(60)))
    r = live.client.post("/api/entries/batch", content=env, headers=headers)
    assert r.status_code == 415 and r.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"
    assert live.client.get(f"/api/entries/{revision_id(json.loads(env)['record'])}"
                           ).status_code == 404


def test_a_media_type_parameter_is_accepted(live: Live) -> None:
    env = line(live.envelope(claim(61)))
    r = live.client.post("/api/entries/batch", content=env,
                         headers={"content-type": "application/x-ndjson; charset=utf-8"})
    assert r.status_code == 200 and json.loads(r.content)["status"] == 201


@pytest.mark.parametrize("workers", [1, 2])
def test_every_line_answered_201_survives_sigkill(
    tmp_path: Path, workers: int, new_db: NewDb
) -> None:
    founding = _founding()
    genesis, log_key = write_library_files(founding, tmp_path)
    db = new_db(tmp_path / "library.db")
    peer = founding.participants["peer"]
    base = now_ms() - 600_000
    batches = [
        [line(peer.envelope(founding.genesis, claim(b * 1000 + i), format_ms(base + b * 1000 + i)))
         for i in range(500)]
        for b in range(40)
    ]
    acknowledged: list[str] = []
    lock = threading.Lock()
    server = Server(genesis, db, log_key, workers=workers)
    try:
        with httpx.Client(base_url=server.url) as c:
            _admit_authorities(c, founding)
        stop = threading.Event()

        def stream(offset: int) -> None:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                for lines in batches[offset::2]:
                    if stop.is_set():
                        return
                    try:
                        r = client.post("/api/entries/batch", content=b"\n".join(lines),
                                        headers=NDJSON)
                    except httpx.HTTPError:
                        return
                    if r.status_code != 200:
                        return
                    with lock:
                        acknowledged.extend(json.loads(x)["body"]["id"]
                                            for x in r.content.splitlines()
                                            if json.loads(x)["status"] == 201)

        # killed mid-batch
        kill_while_streaming(server, stream, 2, stop, lambda: len(acknowledged) >= 1500)
    finally:
        server.stop()
    assert len(acknowledged) >= 1500
    with serving(genesis, db, log_key) as again, httpx.Client(base_url=again.url) as client:
        for rev in acknowledged:
            assert client.get(f"/api/entries/{rev}").status_code == 200
        r = subprocess.run([sys.executable, "-m", "alexandria.cli", "verify", "--genesis-pin",
                            founding.genesis.pin, "--url", again.url],
                           capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr
    assert len(gapless_log(db)) >= 2 + len(acknowledged)


def _announce(port: int, source: str, length: int = 8388608) -> socket.socket:
    """A batch from ``source`` that announces ``length`` bytes and sends two."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(source, 0))
    sock.sendall(b"POST /api/entries/batch HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/x-ndjson\r\nContent-Length: "
                 + str(length).encode() + b"\r\n\r\n{}")
    return sock


def _answer_from(port: int, source: str, body: bytes) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", transport=transport,
                      timeout=30) as client:
        return client.post("/api/entries/batch", content=body, headers=NDJSON)


def test_batches_in_progress_hold_a_bounded_number_of_bytes(
    live: Live, request: pytest.FixtureRequest
) -> None:
    """Four clients announcing 8 MiB each and sending nothing reserve the process's 32 MiB: a
    fifth client's batch is 503 at once (not after their 60 s), and once they hang up batches
    pass."""
    if "writer-process" in request.node.callspec.id:
        pytest.skip("the budget is per HTTP process; two share these connections")
    held = []
    try:
        for i in range(4):
            held.append(_announce(live.server.port, f"127.0.0.{2 + i}"))
        time.sleep(0.5)
        started = time.monotonic()
        r = live.client.post("/api/entries/batch", content=b"{}\n", headers=NDJSON)
        assert r.status_code == 503 and r.json()["code"] == "BATCH_BUDGET", r.text
        assert r.headers["retry-after"] == "1"
        assert time.monotonic() - started < 5
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while True:
        r = live.client.post("/api/entries/batch", content=b"{}\n", headers=NDJSON)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert r.status_code == 200


def test_one_client_holds_at_most_its_share_of_the_batch_budget(
    live: Live, request: pytest.FixtureRequest
) -> None:
    """A client whose batches in progress announce 8 MiB in all (one batch of the largest size,
    sent slowly) is refused its next batch with 429 at once, while another client's batch is
    admitted; once its batch is answered or gone, it is served again."""
    if "writer-process" in request.node.callspec.id:
        pytest.skip("the budget is per HTTP process; two share these connections")
    port = live.server.port
    big = b"\n".join([b'{"x":"' + b"a" * 3000 + b'"}'] * 1000)  # about 3 MiB
    hog = _announce(port, "127.0.0.7", 6 * 1024 * 1024)
    try:
        time.sleep(0.5)
        started = time.monotonic()
        r = _answer_from(port, "127.0.0.7", big)  # 9 MiB in all
        assert r.status_code == 429, r.text
        assert r.json()["code"] == "CLIENT_BUSY"
        assert r.json()["details"]["limit"] == 8 * 1024 * 1024
        assert r.headers["retry-after"] == "1"
        assert time.monotonic() - started < 5
        # a smaller one of the same client still fits its share
        small = _answer_from(port, "127.0.0.7", b"{}\n")
        assert small.status_code == 200 and small.json()["status"] == 400, small.text
        other = _answer_from(port, "127.0.0.8", big)
        assert other.status_code == 200, other.text
        assert len(other.content.splitlines()) == 1000
    finally:
        hog.close()
    deadline = time.monotonic() + 10
    while True:
        r = _answer_from(port, "127.0.0.7", big)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert r.status_code == 200, r.text
