"""``GET /api/changes``: the feed of one root, paged by snapshot cursors (``changes.py``)."""

from __future__ import annotations

import sqlite3

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import int_param, library_of, query_params, raw_json
from alexandria.reads import changes


async def get_changes(request: Request) -> Response:
    params = query_params(request, ("root", "cursor", "limit"))
    root = changes.check_root(params.get("root"))
    limit = int_param(params, "limit", changes.MAX_LIMIT, 1, changes.MAX_LIMIT)
    cursor = params.get("cursor")
    lib = library_of(request)
    limits = lib.limits
    storage = lib.storage

    def read(conn: sqlite3.Connection) -> bytes:
        return changes.read_changes(conn, storage, root, cursor, limit, limits)

    return raw_json(await storage.read(read))


routes = [Route("/api/changes", get_changes, methods=["GET"])]
