"""Self-description routes: ``GET /api/contract`` and ``GET /api/openapi.json``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api import openapi
from alexandria.api.http import json_response, library_of, query_params
from alexandria.api.origin import Origin
from alexandria.api.served_contract import served_contract


def origin_of(request: Request) -> str:
    """The origin this server advertises (``api/origin.py``)."""
    origin: Origin = request.app.state.origin
    return origin.of(request)


async def get_contract(request: Request) -> Response:
    query_params(request, ())
    lib = library_of(request)
    limits = lib.limits
    return json_response(served_contract(origin_of(request), limits))


async def get_openapi(request: Request) -> Response:
    query_params(request, ())
    return json_response(openapi.document(origin_of(request)))


routes = [
    Route("/api/contract", get_contract, methods=["GET"]),
    Route("/api/openapi.json", get_openapi, methods=["GET"]),
]
