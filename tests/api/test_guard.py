"""What every request passes first (``api/guard.py``), against a live ``alexandria serve`` on
127.0.0.1 (one HTTP worker, so that one process's budgets are seen): a head beyond the limit is
refused 431 however it arrives, and a client refused more often than its budget gets its
refusals held — with their typed code and ``Retry-After`` — while no other client's requests,
and none of its own successful ones, are delayed.  The bound on held refusals is checked on the
middleware itself, in process."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from alexandria.api.app import create_app
from alexandria.api.guard import (
    ALL_REFUSAL_BURST,
    HEAD_LIMIT_BYTES,
    HOLD_S,
    REFUSAL_BURST,
    Guard,
    RefusalBudgets,
    head_bytes,
    refusal_budgets,
)
from alexandria.api.mcp.http import McpMount
from alexandria.api.origin import Origin
from alexandria.core.keys import SigningKey
from alexandria.service.bootstrap import Founding
from alexandria.service.enrolment import PER_ADDRESS, signed_bytes
from alexandria.service.library import Library
from alexandria.store.backends import storage_for
from tests.support.liveserver import Server, serving, write_library_files
from tests.support.ops import cli

FAST_S = HOLD_S / 2  # an answer not held comes well within this, even on a loaded machine


@pytest.fixture
def server(tmp_path: Path, founding: Founding) -> Iterator[Server]:
    genesis, log_key = write_library_files(founding, tmp_path)
    with serving(genesis, tmp_path / "lib.db", log_key, workers=1) as s:
        yield s


def _raw(server: Server, request: bytes, chunk: int = 0) -> bytes:
    """Send ``request`` (in pieces of ``chunk`` bytes, a little apart, when given) and read the
    answer until the server closes the connection or 5 s pass."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        try:
            if chunk:
                for i in range(0, len(request), chunk):
                    s.sendall(request[i:i + chunk])
                    time.sleep(0.001)
            else:
                s.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the end: what it said is still to read
        said = b""
        try:
            while chunk_in := s.recv(65536):
                said += chunk_in
                if b"\r\n\r\n" in said and b"content-length: 0" in said.lower():
                    break
        except (ConnectionResetError, TimeoutError):
            pass
        return said


def _head_of(size: int) -> bytes:
    """A GET whose head is exactly ``size`` bytes as ``head_bytes`` counts them."""
    start = b"GET /api/genesis HTTP/1.1\r\nhost: a\r\nx-fill: "
    fill = size - len(start) - 4
    return start + b"y" * fill + b"\r\n\r\n"


def test_the_head_is_measured_as_it_was_sent() -> None:
    scope = {"method": "GET", "raw_path": b"/api/genesis", "query_string": b"",
             "headers": [(b"host", b"a"), (b"x-fill", b"yyy")]}
    assert head_bytes(scope) == len(b"GET /api/genesis HTTP/1.1\r\nhost: a\r\nx-fill: yyy\r\n\r\n")
    scope["query_string"] = b"q=1"
    assert head_bytes(scope) == len(b"GET /api/genesis?q=1 HTTP/1.1\r\nhost: a\r\nx-fill: yyy"
                                    b"\r\n\r\n")


def test_every_head_beyond_the_limit_is_refused_431(server: Server) -> None:
    within = _raw(server, _head_of(HEAD_LIMIT_BYTES))
    assert within.startswith(b"HTTP/1.1 200 "), within[:200]
    # one byte over, and the audit's 100 KB head Granian's buffer let through when it came in
    # one piece (answered 200 before); in one piece and in small pieces
    for size in (HEAD_LIMIT_BYTES + 1, 100_000):
        for chunk in (0, 4096):
            said = _raw(server, _head_of(size), chunk)
            assert said.startswith(b"HTTP/1.1 431 "), (size, chunk, said[:200])
            if b"HEAD_TOO_LARGE" in said:  # the app's answer (Granian's own has no body)
                body = orjson.loads(said.partition(b"\r\n\r\n")[2])
                assert body["details"]["limit"] == HEAD_LIMIT_BYTES
                assert b"connection: close" in said.lower()
    for size in (200_000, 1_000_000):  # beyond Granian's buffer: Granian refuses it itself
        said = _raw(server, _head_of(size))
        assert said == b"" or said.startswith(b"HTTP/1.1 431 "), said[:200]


def _client(server: Server, address: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30,
                        transport=httpx.HTTPTransport(local_address=address))


def _timed(client: httpx.Client, method: str, url: str, **kw: object
           ) -> tuple[float, httpx.Response]:
    t0 = time.monotonic()
    r = client.request(method, url, **kw)  # type: ignore[arg-type]
    return time.monotonic() - t0, r


def _enrolment(founding: Founding) -> bytes:
    key = SigningKey.generate()
    scopes = ["library.comment"]
    return orjson.dumps({"worker": key.public_hex, "name": "flood", "scopes": scopes,
                         "proof": key.sign(signed_bytes(founding.genesis.pin, key.public_hex,
                                                        "flood", scopes))})


def test_refusals_beyond_a_clients_budget_are_held_typed(server: Server,
                                                         founding: Founding) -> None:
    with _client(server, "127.0.0.7") as client:
        for _ in range(PER_ADDRESS):  # the address's enrolment requests: kept
            assert client.post("/api/enrolments", content=_enrolment(founding)
                               ).status_code == 201
        quick = [_timed(client, "POST", "/api/enrolments", content=_enrolment(founding))
                 for _ in range(REFUSAL_BURST)]
        for took, r in quick:  # within the budget: refused at once
            assert r.status_code == 429 and r.json()["code"] == "RATE_LIMITED"
            assert took < FAST_S
        took, r = _timed(client, "POST", "/api/enrolments", content=_enrolment(founding))
        assert took >= HOLD_S  # over the budget: held
        assert r.status_code == 429 and r.json()["code"] == "RATE_LIMITED"
        assert int(r.headers["retry-after"]) == r.json()["details"]["retry_after"] > 0
        assert r.headers["connection"] == "close"
        # the client's own requests that succeed are never held
        took, ok = _timed(client, "GET", "/api/genesis")
        assert ok.status_code == 200 and took < FAST_S
        # and any refusal over budget is held, whatever its route and status
        took, r = _timed(client, "GET", "/api/entries/" + "0" * 64)
        assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_REVISION"
        assert took >= HOLD_S


def test_one_addresss_flood_of_refusals_neither_refuses_nor_slows_another(
        server: Server) -> None:
    flood = 3 * ALL_REFUSAL_BURST  # more than every client's budget together
    missing = b"GET /api/entries/" + b"0" * 64 + b" HTTP/1.1\r\nhost: a\r\n\r\n"

    def refused(_: int) -> tuple[float, bytes]:
        with socket.socket() as s:
            s.settimeout(30)
            s.bind(("127.0.0.9", 0))
            s.connect(("127.0.0.1", server.port))
            t0 = time.monotonic()
            s.sendall(missing)
            said = s.recv(65536)
            return time.monotonic() - t0, said[:12]

    with ThreadPoolExecutor(64) as pool:
        flooding = pool.map(refused, range(flood))
        time.sleep(HOLD_S / 2)  # the budgets are spent: the flood's refusals are being held
        with _client(server, "127.0.0.10") as other:
            times = []
            for _ in range(20):
                took, r = _timed(other, "GET", "/api/genesis")
                assert r.status_code == 200
                times.append(took)
                took, r = _timed(other, "GET", "/api/catalogue")
                assert r.status_code == 200
                times.append(took)
        answers = list(flooding)
    assert max(times) < HOLD_S, times  # never held
    assert statistics.median(times) < FAST_S, times
    assert {status for _, status in answers} == {b"HTTP/1.1 404"}
    assert sum(took >= HOLD_S for took, _ in answers) >= flood - ALL_REFUSAL_BURST


# --- the middleware in process: the bound on held refusals ----------------------------------

def _app(guard_budgets: RefusalBudgets, max_held: int, hold_s: float) -> Guard:
    async def refuse(_request: Request) -> Response:
        return JSONResponse({"error": "no", "code": "NO", "details": {}}, 400,
                            headers={"Retry-After": "1"})

    async def ok(_request: Request) -> Response:
        return JSONResponse({"ok": True})

    inner = Starlette(routes=[Route("/refuse", refuse), Route("/ok", ok)])
    return Guard(inner, budgets=guard_budgets, max_held=max_held, hold_s=hold_s)


async def test_at_most_max_held_refusals_are_held_the_rest_answered_at_once() -> None:
    guard = _app(RefusalBudgets(burst=0, total_burst=0), max_held=3, hold_s=1.0)
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        async def timed(path: str) -> tuple[float, httpx.Response]:
            t0 = time.monotonic()
            r = await client.get(path)
            return time.monotonic() - t0, r

        tasks = [asyncio.create_task(timed("/refuse")) for _ in range(10)]
        await asyncio.sleep(0.3)
        assert guard.held == 3
        refusals = await asyncio.gather(*tasks)
        assert sum(took >= 1.0 for took, _ in refusals) == 3
        assert sum(took < 0.5 for took, _ in refusals) == 7
        for _, r in refusals:  # held or not, the same typed answer, closing the connection
            assert r.status_code == 400 and r.json()["code"] == "NO"
            assert r.headers["retry-after"] == "1" and r.headers["connection"] == "close"
        took, r = await timed("/ok")
        assert r.status_code == 200 and took < 0.5 and "connection" not in r.headers
    assert guard.held == 0


def test_the_addresses_remembered_are_bounded() -> None:
    budgets = RefusalBudgets(burst=1, per_second=0.0, total_burst=1e9, max_clients=100)
    now = time.monotonic()
    for i in range(1000):
        assert budgets.take(f"10.0.{i // 256}.{i % 256}", now)
    assert len(budgets) == 100
    assert not budgets.take("10.0.3.231", now)  # the last one used is remembered: spent


def test_a_flood_from_many_addresses_spends_the_budget_of_all() -> None:
    budgets = RefusalBudgets(burst=5, per_second=0.0, total_burst=50, total_per_second=0.0)
    now = time.monotonic()
    within = sum(budgets.take(f"10.1.0.{i}", now) for i in range(200))
    assert within == 50


def test_the_operator_sets_the_burst_per_client() -> None:
    """``serve --refusal-burst N``: N refusals a client at once (and at least five times as
    many for all clients together); without it, the defaults."""
    now = time.monotonic()
    default = refusal_budgets(None)
    assert sum(default.take("10.2.0.1", now) for _ in range(100)) == REFUSAL_BURST
    wide = refusal_budgets(500)
    assert sum(wide.take("10.2.0.1", now) for _ in range(1000)) == 500
    assert wide.total_burst >= 5 * 500


def test_serve_refuses_a_refusal_burst_below_one(tmp_path: Path) -> None:
    out = cli("serve", "--refusal-burst", "0", "--port", "0", check=False)
    assert out.returncode == 2 and "--refusal-burst" in out.stderr, out.stderr


# --- /mcp counts a call to the client the proxy forwarded -----------------------------------

async def test_mcp_calls_are_counted_to_the_forwarded_client(tmp_path: Path,
                                                             founding: Founding) -> None:
    library = Library(founding.genesis, storage_for(tmp_path / "lib.db", founding.genesis),
                      founding.log_key)
    app = create_app(library, origin=Origin(trust_proxy_headers=True))
    mount = next(r.endpoint for r in app.routes if getattr(r, "path", None) == "/mcp")
    assert isinstance(mount, McpMount)
    call = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": "get", "arguments": {"revision": "f" * 64}}})
    headers = {"content-type": "application/json",
               "accept": "application/json, text/event-stream"}
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                  base_url="http://testserver") as client):
        with mount.limits.place("203.0.113.7"):  # that client has a call running
            busy = await client.post("/mcp", content=call,
                                     headers={**headers, "x-forwarded-for": "203.0.113.7"})
            assert busy.status_code == 429 and busy.json()["code"] == "CLIENT_BUSY"
            assert busy.headers["retry-after"] == str(busy.json()["details"]["retry_after"])
            # another client behind the same proxy (the hop left of it is the client's to write)
            other = await client.post("/mcp", content=call, headers={
                **headers, "x-forwarded-for": "203.0.113.7, 198.51.100.1"})
            assert other.status_code == 200, other.text
