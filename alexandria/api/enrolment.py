"""Enrolment requests over HTTP: ``alexandria login`` and ``alexandria authority approve``
(``service/enrolment.py`` says why and what is bounded).

- ``POST /api/enrolments``: a request → 201 ``{code, expires_at}``;
- ``GET /api/enrolments``: the open requests, for the operator (signed by an authority key);
- ``GET /api/enrolments/{code}?worker=KEY``: the requester polls: ``pending`` or ``approved``
  with the certificate (404 for another key: a code alone shows nothing);
- ``POST /api/enrolments/{code}/certificate``: the operator's signed worker certificate.

Times are the storage's clock (the server's, controllable in tests), as for admissions.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import json_response, query_params, read_body
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


def _limiter(request: Request) -> enrolment.AddressLimiter:
    """One per app (per server process: N workers allow N times the rate; the table's cap on
    open requests is shared)."""
    state = request.app.state
    if not hasattr(state, "enrolment_limiter"):
        state.enrolment_limiter = enrolment.AddressLimiter()
    limiter: enrolment.AddressLimiter = state.enrolment_limiter
    return limiter


async def post_enrolment(request: Request) -> Response:
    lib: Library = request.app.state.library
    query_params(request, ())
    body = await read_body(request, enrolment.MAX_REQUEST_BYTES)
    req = enrolment.parse_request(body, lib.genesis.pin)
    now = lib.storage.clock()
    _limiter(request).check(request.client.host if request.client else "unknown", now)
    code = enrolment.new_code()
    expires = await store.create(lib.storage, code, req.worker, req.name, req.scopes, now,
                                 enrolment.TTL_MS, enrolment.MAX_OPEN)
    return json_response({"code": code, "expires_at": format_ms(expires)}, 201,
                         headers=PRIVATE)


async def list_enrolments(request: Request) -> Response:
    lib: Library = request.app.state.library
    query_params(request, ())
    now = lib.storage.clock()
    key = enrolment.parse_list_header(request.headers.get(enrolment.LIST_HEADER),
                                      lib.genesis.pin, now)
    rows = await store.open_requests(lib.storage, now, LIST_LIMIT, key)
    return json_response({"requests": [enrolment.public_view(r) for r in rows]},
                         headers=PRIVATE)


async def get_enrolment(request: Request) -> Response:
    lib: Library = request.app.state.library
    params = query_params(request, ("worker",))
    code = enrolment.normalize_code(str(request.path_params["code"]))
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
