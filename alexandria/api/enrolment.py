"""Enrolment requests over HTTP: ``alexandria login`` and ``alexandria authority approve``
(``service/enrolment.py`` says why and what is bounded).

- ``POST /api/enrolments``: a request → 201 ``{code, expires_at}``;
- ``GET /api/enrolments``: the oldest open requests and how many are open, for the operator
  (signed by an authority key);
- ``GET /api/enrolments/{code}?worker=KEY``: the requester polls: ``pending`` or ``approved``
  with the certificate (404 for another key: a code alone shows nothing);
- ``GET /api/enrolments/{code}`` signed by an authority key: that one request, for
  ``alexandria authority approve CODE``, however many others wait;
- ``POST /api/enrolments/{code}/certificate``: the operator's signed worker certificate.

Times are the storage's clock (the server's, controllable in tests), as for admissions.  The
limits per client address and per key are kept by each server process (``serve --workers N``
allows N times the rate; the cap on open requests is the table's, shared).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.client_address import client_address
from alexandria.api.http import json_response, library_of, query_params, read_body
from alexandria.api.origin import Origin
from alexandria.core.canonical import parse_json
from alexandria.core.keys import HEX64
from alexandria.core.timestamps import format_ms
from alexandria.core.trust import parse_worker_certificate
from alexandria.errors import Malformed, NotFound, NotPermitted, RateLimited
from alexandria.service import enrolment
from alexandria.service.library import Library
from alexandria.store import enrolments as store

PRIVATE = {"Cache-Control": "no-store"}
LIST_LIMIT = 100


class Limiters:
    """The limits of one app (one server process)."""

    def __init__(self) -> None:
        self.by_address = enrolment.AddressLimiter()
        self.by_key = enrolment.KeyLimiter()
        self.refusals = enrolment.RefusalLimiter()
        self.kept = enrolment.KeptRate()


def _limiters(request: Request) -> Limiters:
    state = request.app.state
    if not hasattr(state, "enrolment_limiters"):
        state.enrolment_limiters = Limiters()
    limiters: Limiters = state.enrolment_limiters
    return limiters


def _client(request: Request) -> tuple[str, str]:
    origin: Origin = request.app.state.origin
    return client_address(request, origin.trust_proxy_headers)


@contextlib.asynccontextmanager
async def _authority_only(request: Request, now: int, signed: bool = True
                          ) -> AsyncIterator[None]:
    """What only an authority may ask: refused at once to an address refused too often, and
    each refusal (not an authority, a forged or stale signature, a bad certificate) counted.
    ``signed``: a question signed in the header, whose absence is told first (costs nothing)."""
    if signed and not request.headers.get(enrolment.LIST_HEADER):
        enrolment.parse_list_header(None, "", now)  # AUTHORITY_REQUIRED
    limiters = _limiters(request)
    key, shown = _client(request)
    limiters.refusals.check(key, now, shown, count=False)
    try:
        yield
    except (NotPermitted, Malformed):
        limiters.refusals.check(key, now, shown)
        raise


async def post_enrolment(request: Request) -> Response:
    """Every refusal before the writer: the address's limit first (it bounds the signature
    checks a client can ask for), then the request and its signature, the key's limit, the
    process's rate and, on a read connection, the cap on open requests."""
    lib = library_of(request)
    query_params(request, ())
    limiters = _limiters(request)
    limit_key, shown = _client(request)
    now = lib.storage.clock()
    limiters.by_address.check(limit_key, now, shown)
    body = await read_body(request, enrolment.MAX_REQUEST_BYTES)
    req = enrolment.parse_request(body, lib.genesis.pin)
    limiters.by_key.check(req.worker, now, req.worker[:16] + "…")
    try:
        limiters.kept.take(now)
    except RateLimited:  # the server's rate, not the client's: its allowance is not spent
        limiters.by_address.refund(limit_key)
        limiters.by_key.refund(req.worker)
        raise
    await store.precheck_create(lib.storage, req.worker, now, enrolment.MAX_OPEN)
    code = enrolment.new_code()
    expires = await store.create(lib.storage, code, req.worker, req.name, req.scopes, now,
                                 enrolment.TTL_MS, enrolment.MAX_OPEN)
    return json_response({"code": code, "expires_at": format_ms(expires)}, 201,
                         headers=PRIVATE)


def _authority(request: Request, lib: Library, now: int) -> str:
    return enrolment.parse_list_header(request.headers.get(enrolment.LIST_HEADER),
                                       lib.genesis.pin, now)


async def list_enrolments(request: Request) -> Response:
    lib = library_of(request)
    query_params(request, ())
    now = lib.storage.clock()
    async with _authority_only(request, now):
        key = _authority(request, lib, now)
        rows, total = await store.open_requests(lib.storage, now, LIST_LIMIT, key)
    return json_response({"requests": [enrolment.public_view(r) for r in rows],
                          "total": total}, headers=PRIVATE)


async def get_enrolment(request: Request) -> Response:
    lib = library_of(request)
    params = query_params(request, ("worker",))
    code = enrolment.normalize_code(str(request.path_params["code"]))
    if "worker" not in params:  # the operator's question: signed by an authority key
        now = lib.storage.clock()
        async with _authority_only(request, now):
            found = await store.request(lib.storage, code, now, _authority(request, lib, now))
        view = {**enrolment.public_view(found),
                "status": "approved" if found["certificate"] else "pending"}
        return json_response(view, headers=PRIVATE)
    worker = params.get("worker", "")
    if not HEX64.match(worker):
        raise Malformed("worker is the requesting 64-hex public key", "BAD_KEY",
                        parameter="worker")
    row = await store.get(lib.storage, code, lib.storage.clock())
    if row is None or row["worker"] != worker:
        raise NotFound(f"no open enrolment request {code} for this key (expired, or never"
                       " made)", "UNKNOWN_CODE", enrolment=code)
    out = {"code": code, "status": "approved" if row["certificate"] else "pending",
           "expires_at": format_ms(row["expires_ms"])}
    if row["certificate"]:
        out["certificate"] = row["certificate"]
    return json_response(out, headers=PRIVATE)


async def post_certificate(request: Request) -> Response:
    lib = library_of(request)
    query_params(request, ())
    code = enrolment.normalize_code(str(request.path_params["code"]))
    now = lib.storage.clock()
    async with _authority_only(request, now, signed=False):
        body = await read_body(request, enrolment.MAX_REQUEST_BYTES * 4)
        cert = parse_worker_certificate(parse_json(body), lib.genesis)
        await store.approve(lib.storage, code, cert, now)
    return json_response({"code": code, "status": "approved"}, headers=PRIVATE)


async def enrolments(request: Request) -> Response:
    """``GET`` and ``POST /api/enrolments`` on one route: a 405 then names both methods in its
    ``Allow`` header, as the OpenAPI document does."""
    if request.method == "POST":
        return await post_enrolment(request)
    return await list_enrolments(request)


routes = [
    Route("/api/enrolments", enrolments, methods=["GET", "POST"]),
    Route("/api/enrolments/{code}", get_enrolment, methods=["GET"]),
    Route("/api/enrolments/{code}/certificate", post_certificate, methods=["POST"]),
]
