"""Discovery routes: ``GET /api/catalogue`` and ``GET /api/scores``."""

from __future__ import annotations

import sqlite3

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import (
    choice_param,
    int_param,
    json_response,
    library_of,
    query_params,
    raw_json,
)
from alexandria.core.keys import HEX64
from alexandria.errors import Malformed
from alexandria.reads.catalogue import (
    METHODS,
    PROJECTIONS,
    SORTS,
    VERDICTS,
    VIEWS,
    CatalogueQuery,
    check_query,
    find,
    summaries,
)
from alexandria.reads.scores import scores
from alexandria.store.search_index import LISTED_KINDS

MAX_OFFSET = 2**53 - 1  # the largest integer JSON carries exactly
CATALOGUE_PARAMETERS = (
    "q", "kind", "sort", "offset", "author", "method", "verdict", "projection", "view",
)


def _optional_choice(params: dict[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    if name not in params:
        return None
    return choice_param(params, name, "", allowed)


def _actor(params: dict[str, str], required: bool = False) -> str | None:
    value = params.get("author")
    if value is None:
        if required:
            raise Malformed("author is required: a 64-hex actor", "MISSING_PARAMETER",
                            parameter="author")
        return None
    if not HEX64.match(value):
        raise Malformed("author must be a 64 lowercase hex actor", "BAD_PARAMETER",
                        parameter="author")
    return value


def parse_catalogue_query(params: dict[str, str]) -> CatalogueQuery:
    q = params.get("q")
    if q is not None:
        check_query(q)
        if not q.strip():
            q = None
    return CatalogueQuery(
        q=q,
        kind=_optional_choice(params, "kind", LISTED_KINDS),
        view=choice_param(params, "view", "all", tuple(VIEWS)),
        sort=choice_param(params, "sort", "new" if q is None else "relevance", SORTS),
        offset=int_param(params, "offset", 0, 0, MAX_OFFSET),
        author=_actor(params),
        method=_optional_choice(params, "method", METHODS),
        verdict=_optional_choice(params, "verdict", VERDICTS),
        projection=choice_param(params, "projection", "full", PROJECTIONS),
    )


async def get_catalogue(request: Request) -> Response:
    query = parse_catalogue_query(query_params(request, CATALOGUE_PARAMETERS))
    lib = library_of(request)
    storage = lib.storage

    def read(conn: sqlite3.Connection) -> tuple[bytes, int, int]:
        page = find(conn, query, storage.read_ahead)
        if query.projection == "summary":
            storage.read_ahead("records", page.sequences)
            items = orjson.dumps(summaries(conn, page.sequences))
        else:
            items = b"[" + b",".join(storage.signed_many(conn, page.sequences)) + b"]"
        return items, len(page.sequences), page.total

    items, count, total = await storage.read(read)
    end = query.offset + count
    body = b"".join((
        b'{"items":', items,
        b',"library":', orjson.dumps(lib.genesis.library),
        b',"next_offset":', orjson.dumps(end if count and end < total else None),
        b',"total":', str(total).encode(), b"}",
    ))
    return raw_json(body)


async def get_scores(request: Request) -> Response:
    params = query_params(request, ("author", "offset"))
    author = _actor(params, required=True)
    assert author is not None
    offset = int_param(params, "offset", 0, 0, MAX_OFFSET)
    storage = library_of(request).storage
    result = await storage.read(lambda conn: scores(conn, author, offset, storage.read_ahead))
    return json_response(result)


routes = [
    Route("/api/catalogue", get_catalogue, methods=["GET"]),
    Route("/api/scores", get_scores, methods=["GET"]),
]
