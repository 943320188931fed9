"""Read routes of single entries, the genesis and the authority documents."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import (
    json_response,
    library_of,
    not_found,
    query_params,
    raw_json,
    revision_param,
)


async def get_entry(request: Request) -> Response:
    rev = revision_param(request)
    query_params(request, ())
    data = await library_of(request).storage.entry(rev)
    if data is None:
        raise not_found(rev)
    return raw_json(data)


async def get_head(request: Request) -> Response:
    rev = revision_param(request)
    query_params(request, ())
    data = await library_of(request).storage.head_entry(rev)
    if data is None:
        raise not_found(rev)
    return raw_json(data)


async def get_genesis(request: Request) -> Response:
    query_params(request, ())
    lib = library_of(request)
    return json_response({"pin": lib.genesis.pin, "document": lib.genesis.document})


async def get_authority(request: Request) -> Response:
    query_params(request, ())
    items = await library_of(request).storage.authority_documents()
    return json_response({"items": items})


routes = [
    Route("/api/entries/{revision}", get_entry, methods=["GET"]),
    Route("/api/entries/{revision}/head", get_head, methods=["GET"]),
    Route("/api/genesis", get_genesis, methods=["GET"]),
]
