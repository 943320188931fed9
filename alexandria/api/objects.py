"""Read routes of objects in context: ``/api/objects/{revision}``,
``/api/entries/{revision}/connections`` and ``/api/entries/{revision}/discussion``.

Thin handlers: parse strict parameters, run one ``objects`` read on the reader connection,
and splice the stored signed records into the response without re-encoding them.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import (
    bool_param,
    choice_param,
    int_param,
    json_response,
    library_of,
    not_found,
    query_params,
    raw_json,
    revision_param,
)
from alexandria.reads import objects

#: Largest ``offset`` accepted: the largest integer JSON carries exactly.
MAX_OFFSET = 2**53 - 1


def _records(records: Sequence[bytes]) -> bytes:
    return b"[" + b",".join(records) + b"]"


async def get_object(request: Request) -> Response:
    rev = revision_param(request)
    params = query_params(request, ("section", "offset", "exact"))
    section = choice_param(params, "section", "all", objects.SECTIONS)
    offset = int_param(params, "offset", 0, 0, MAX_OFFSET)
    exact = bool_param(params, "exact")
    store = library_of(request).storage
    view = await store.read(
        lambda conn: objects.object_view(conn, store, rev, section, offset, exact)
    )
    if view is None:
        raise not_found(rev)
    return raw_json(b"".join((
        b'{"ancestors":', _records(view.ancestors),
        b',"head":', orjson.dumps(view.head),
        b',"item":', view.item,
        b',"items":', _records(view.items),
        b',"next_offset":', orjson.dumps(view.next_offset),
        b',"original":', view.original,
        b',"revisions":', orjson.dumps(view.revisions),
        b"}",
    )))


async def get_connections(request: Request) -> Response:
    rev = revision_param(request)
    offset = int_param(query_params(request, ("offset",)), "offset", 0, 0, MAX_OFFSET)
    store = library_of(request).storage
    found = await store.read(lambda conn: objects.connections(conn, rev, offset))
    if found is None:
        raise not_found(rev)
    return json_response(found.to_json())


async def get_discussion(request: Request) -> Response:
    rev = revision_param(request)
    params = query_params(request, ("sort", "offset"))
    sort = choice_param(params, "sort", "old", objects.DISCUSSION_SORTS)
    offset = int_param(params, "offset", 0, 0, MAX_OFFSET)
    store = library_of(request).storage
    found = await store.read(lambda conn: objects.discussion(conn, store, rev, sort, offset))
    if found is None:
        raise not_found(rev)
    return raw_json(b"".join((
        b'{"items":', _records(found.items),
        b',"next_offset":', orjson.dumps(found.next_offset),
        b',"total":', orjson.dumps(found.total),
        b"}",
    )))


routes = [
    Route("/api/objects/{revision}", get_object, methods=["GET"]),
    Route("/api/entries/{revision}/connections", get_connections, methods=["GET"]),
    Route("/api/entries/{revision}/discussion", get_discussion, methods=["GET"]),
]
