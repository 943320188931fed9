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

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.client_address import client_address
from alexandria.api.http import json_response, query_params, read_body
from alexandria.api.origin import Origin
from alexandria.core.canonical import parse_json
from alexandria.core.keys import HEX64
from alexandria.core.timestamps import format_ms
from alexandria.core.trust import parse_worker_certificate
from alexandria.errors import BadRequest, NotFound
from alexandria.service import enrolment
from alexandria.service.library import Library
from alexandria.store import enrolments as store

PRIVATE = {"Cache-Control": "no-store"}
LIST_LIMIT = 100


def _limiters(request: Request) -> tuple[enrolment.AddressLimiter, enrolment.KeyLimiter]:
    """One pair per app (per server process)."""
    state = request.app.state
    if not hasattr(state, "enrolment_limiters"):
        state.enrolment_limiters = (enrolment.AddressLimiter(), enrolment.KeyLimiter())
    limiters: tuple[enrolment.AddressLimiter, enrolment.KeyLimiter] = \
        state.enrolment_limiters
    return limiters


async def post_enrolment(request: Request) -> Response:
    """Every refusal before the writer: the address's limit first (it bounds the signature
    checks a client can ask for), then the request and its signature, the key's limit and,
    on a read connection, the cap on open requests."""
    lib: Library = request.app.state.library
    query_params(request, ())
    by_address, by_key = _limiters(request)
    origin: Origin = request.app.state.origin
    limit_key, shown = client_address(request, origin.trust_proxy_headers)
    now = lib.storage.clock()
    by_address.check(limit_key, now, shown)
    body = await read_body(request, enrolment.MAX_REQUEST_BYTES)
    req = enrolment.parse_request(body, lib.genesis.pin)
    by_key.check(req.worker, now, req.worker[:16] + "…")
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
    lib: Library = request.app.state.library
    query_params(request, ())
    now = lib.storage.clock()
    key = _authority(request, lib, now)
    rows, total = await store.open_requests(lib.storage, now, LIST_LIMIT, key)
    return json_response({"requests": [enrolment.public_view(r) for r in rows],
                          "total": total}, headers=PRIVATE)


async def get_enrolment(request: Request) -> Response:
    lib: Library = request.app.state.library
    params = query_params(request, ("worker",))
    code = enrolment.normalize_code(str(request.path_params["code"]))
    if "worker" not in params:  # the operator's question: signed by an authority key
        now = lib.storage.clock()
        found = await store.request(lib.storage, code, now, _authority(request, lib, now))
        view = {**enrolment.public_view(found),
                "status": "approved" if found["certificate"] else "pending"}
        return json_response(view, headers=PRIVATE)
    worker = params.get("worker", "")
    if not HEX64.match(worker):
        raise BadRequest("worker is the requesting 64-hex public key", "BAD_KEY",
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
    lib: Library = request.app.state.library
    query_params(request, ())
    code = enrolment.normalize_code(str(request.path_params["code"]))
    body = await read_body(request, enrolment.MAX_REQUEST_BYTES * 4)
    cert = parse_worker_certificate(parse_json(body), lib.genesis)
    await store.approve(lib.storage, code, cert, lib.storage.clock())
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
