"""Enrolment under a flood, against a live ``alexandria serve`` on 127.0.0.1, on both backends:
a legitimate code stays approvable however many requests wait, limits apply per client address
(the forwarded one only with ``--trust-proxy-headers``) and per key, and every refusal is
answered while another connection holds the library's write lock — none needs the writer
(``service/enrolment.py``).  Clients bind to other loopback addresses (127.0.0.2…) to be many
clients."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from alexandria.core.keys import SigningKey
from alexandria.core.timestamps import now
from alexandria.core.trust import make_worker_certificate
from alexandria.service.enrolment import LIST_HEADER, list_header, signed_bytes
from alexandria.service.operator_dir import OperatorDir, window
from tests.support.cli import Library, cli, cli_json, module_library
from tests.support.liveserver import NewDb, Server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    yield from module_library(tmp_path_factory, "enrol", module_db)


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    """A library whose server believes its reverse proxy: ``--trust-proxy-headers``."""
    base = tmp_path_factory.mktemp("proxied")
    library = Library.create(base, module_db(base / "library.db"))
    library.stop()
    library.server = Server(library.operator / "genesis.json", library.db,
                            library.operator / "log.key", port=library.port,
                            extra=("--trust-proxy-headers",))
    yield library
    library.stop()


def _client(lib: Library, address: str = "127.0.0.1", timeout: float = 30) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=lib.url, transport=transport, timeout=timeout)


def _body(lib: Library, key: SigningKey | None = None, name: str = "mallory") -> bytes:
    key = key or SigningKey.generate()
    scopes = ["library.comment"]
    return orjson.dumps({"worker": key.public_hex, "name": name, "scopes": scopes,
                         "proof": key.sign(signed_bytes(lib.pin, key.public_hex, name,
                                                        scopes))})


def _ask(client: httpx.Client, lib: Library, key: SigningKey | None = None,
         headers: dict[str, str] | None = None) -> httpx.Response:
    """One request; again when the server's rate of kept requests (a burst of 100, then 10 a
    second) says to retry in a moment."""
    body = _body(lib, key)
    for _ in range(60):
        r = client.post("/api/enrolments", content=body, headers=headers)
        if r.status_code != 429 or r.json()["code"] != "ENROLMENTS_BUSY":
            return r
        time.sleep(int(r.headers["retry-after"]))
    raise AssertionError("the server kept no request for a minute")


def _refused(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    assert body["code"] == code, body
    if status == 429:
        assert int(r.headers["retry-after"]) == body["details"]["retry_after"] > 0
    return body


def test_a_code_is_approved_however_many_requests_wait(lib: Library, tmp_path: Path) -> None:
    for i in range(2, 13):  # 11 addresses, 10 requests each: all kept
        with _client(lib, f"127.0.0.{i}") as client:
            assert [_ask(client, lib).status_code for _ in range(10)] == [201] * 10
    home = tmp_path / "alice"
    code = cli("login", lib.url, "--name", "alice", "--genesis", lib.pin, "--no-wait",
               home=home).stdout.strip()
    op = str(lib.operator)
    actor = cli("authority", "approve", code, "--dir", op, "--library", lib.url).stdout.strip()
    worker = cli_json("whoami", home=home)["worker"]
    poll = httpx.get(f"{lib.url}/api/enrolments/{code}", params={"worker": worker}).json()
    assert poll["status"] == "approved" and poll["certificate"]["certificate"]["worker"] == worker
    assert json.loads((lib.operator / "actors.json").read_text())["alice"] == actor
    again = cli("authority", "approve", code, "--dir", op, "--library", lib.url, expect=1)
    assert "CODE_USED" in again.stderr
    typo = cli("authority", "approve", "ZZZZ-ZZZZ", "--dir", op, "--library", lib.url, expect=1)
    assert "UNKNOWN_CODE" in typo.stderr
    listing = cli_json("authority", "requests", "--dir", op, "--library", lib.url)
    assert len(listing["requests"]) == 100 and listing["total"] >= 110
    shown = cli("authority", "requests", "--dir", op, "--library", lib.url)
    assert f"the oldest 100 of {listing['total']}" in shown.stderr


def test_without_trust_a_forwarded_address_is_ignored(lib: Library) -> None:
    with _client(lib, "127.0.0.13") as client:
        for i in range(10):
            r = _ask(client, lib, headers={"X-Forwarded-For": f"203.0.113.{i}"})
            assert r.status_code == 201, r.text
        r = _ask(client, lib, headers={"X-Forwarded-For": "203.0.113.200",
                                       "Forwarded": "for=198.51.100.1"})
        body = _refused(r, 429, "RATE_LIMITED")
        assert body["details"]["per"] == "address" and "127.0.0.13" in body["error"]


def test_forwarded_addresses_get_separate_limits(proxied: Library) -> None:
    with _client(proxied) as client:  # every request from the proxy's one address
        def ask(**headers: str) -> httpx.Response:
            return _ask(client, proxied, headers=headers)

        for i in range(10):  # the hops left of the right-most are the client's to write
            assert ask(**{"X-Forwarded-For": f"10.9.9.{i}, 203.0.113.1"}).status_code == 201
        body = _refused(ask(**{"X-Forwarded-For": "203.0.113.1"}), 429, "RATE_LIMITED")
        assert "203.0.113.1" in body["error"]
        _refused(ask(**{"X-Forwarded-For": "203.0.113.2, 203.0.113.1"}), 429, "RATE_LIMITED")
        assert ask(**{"X-Forwarded-For": "203.0.113.1, 203.0.113.2"}).status_code == 201
        # Forwarded (RFC 7239) when no X-Forwarded-For came: IPv6 clients by their /64
        for i in range(10):
            assert ask(Forwarded=f'for="[2001:db8:1:2::{i + 1}]:4711"').status_code == 201
        _refused(ask(Forwarded='for="[2001:db8:1:2:ffff::9]"'), 429, "RATE_LIMITED")
        assert ask(Forwarded='for="[2001:db8:1:3::1]"').status_code == 201
        assert ask(Forwarded="for=192.0.2.60;proto=http").status_code == 201
        # a right-most hop that is no address is not believed: the proxy's own limit counts
        for _ in range(10):
            assert ask(**{"X-Forwarded-For": "unknown"}).status_code == 201
        _refused(ask(**{"X-Forwarded-For": "_hidden"}), 429, "RATE_LIMITED")
        _refused(ask(), 429, "RATE_LIMITED")


def test_a_key_has_its_own_limit(lib: Library) -> None:
    key = SigningKey.generate()
    for i in range(5):  # asking again replaces the key's request: from anywhere, 5 times
        with _client(lib, f"127.0.0.{30 + i}") as client:
            assert _ask(client, lib, key).status_code == 201
    with _client(lib, "127.0.0.40") as client:
        body = _refused(_ask(client, lib, key), 429, "RATE_LIMITED")
        assert body["details"]["per"] == "key"
        assert _ask(client, lib).status_code == 201  # another key from the same address


@contextlib.contextmanager
def _write_lock(lib: Library) -> Iterator[None]:
    """Hold the library's write lock from another connection, as a long admission batch of
    another process would: whatever needs the writer waits until it is released."""
    if isinstance(lib.db, Path):
        conn = sqlite3.connect(lib.db, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        return
    with psycopg.connect(str(lib.db)) as pg:
        pg.execute("SELECT version FROM ledger_writes WHERE id = 1 FOR UPDATE")
        yield
        pg.rollback()


def test_every_refusal_is_answered_without_the_writer(lib: Library) -> None:
    stranger = SigningKey.generate()
    with _client(lib, "127.0.0.50") as client:
        for _ in range(10):
            assert _ask(client, lib).status_code == 201
    key = SigningKey.generate()
    with _client(lib, "127.0.0.51") as client:
        code = _ask(client, lib, key).json()["code"]
    op = OperatorDir(lib.operator)
    not_before, not_after = window(1)
    forged = make_worker_certificate(op.genesis(), "cd" * 32, key.public_hex,
                                     ["library.comment"], stranger, not_before, not_after)
    real = make_worker_certificate(op.genesis(), "cd" * 32, key.public_hex, ["library.comment"],
                                   SigningKey.load(op.root / "authority.key"), not_before,
                                   not_after)
    signed = {LIST_HEADER: list_header(lib.pin, stranger, now())}
    # the server waits up to 30 s for the write lock, then answers 503: a refusal that needed
    # the writer would time out here
    with _write_lock(lib), _client(lib, "127.0.0.50", timeout=10) as client:
        _refused(client.get("/api/enrolments", headers=signed), 403, "AUTHORITY_UNKNOWN")
        _refused(client.get(f"/api/enrolments/{code}", headers=signed), 403,
                 "AUTHORITY_UNKNOWN")
        _refused(_ask(client, lib), 429, "RATE_LIMITED")
        _refused(client.post(f"/api/enrolments/{code}/certificate",
                             content=orjson.dumps(forged)), 403, "AUTHORITY_UNKNOWN")
        _refused(client.post("/api/enrolments/ZZZZ-ZZZZ/certificate",
                             content=orjson.dumps(forged)), 403, "AUTHORITY_UNKNOWN")
        _refused(client.post("/api/enrolments/ZZZZ-ZZZZ/certificate",
                             content=orjson.dumps(real)), 404, "UNKNOWN_CODE")
        wrong = json.loads(_body(lib, key))
        wrong["proof"] = stranger.sign(b"something else")
        with _client(lib, "127.0.0.52", timeout=10) as other:
            _refused(other.post("/api/enrolments", content=orjson.dumps(wrong)), 400,
                     "PROOF_INVALID")
        poll = client.get(f"/api/enrolments/{code}", params={"worker": key.public_hex})
        assert poll.json()["status"] == "pending"


def test_an_address_refused_too_often_is_refused_at_once(lib: Library) -> None:
    """A stranger's questions only an authority may ask: 20 refusals, then 429 before any
    signature is checked, for that address alone."""
    authority = SigningKey.load(lib.operator / "authority.key")
    with _client(lib, "127.0.0.60") as client:
        for _ in range(20):
            stranger = {LIST_HEADER: list_header(lib.pin, SigningKey.generate(), now())}
            _refused(client.get("/api/enrolments", headers=stranger), 403, "AUTHORITY_UNKNOWN")
        mine = {LIST_HEADER: list_header(lib.pin, authority, now())}
        body = _refused(client.get("/api/enrolments", headers=mine), 429, "RATE_LIMITED")
        assert body["details"]["per"] == "address"
        _refused(client.get("/api/enrolments/ZZZZ-ZZZZ", headers=mine), 429, "RATE_LIMITED")
        _refused(client.post("/api/enrolments/ZZZZ-ZZZZ/certificate", content=b"{}"), 429,
                 "RATE_LIMITED")
    with _client(lib, "127.0.0.61") as client:
        for _ in range(25):  # an operator's own questions never count
            mine = {LIST_HEADER: list_header(lib.pin, authority, now())}
            assert client.get("/api/enrolments", headers=mine).status_code == 200
