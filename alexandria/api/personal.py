"""``POST /api/personal``: a participant's private following/saved lists (docs/personal.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import error_response, library_of, query_params, raw_json, read_body
from alexandria.core.records import PERSONAL_KINDS
from alexandria.errors import AlexandriaError
from alexandria.rules.admission import prepare
from alexandria.rules.personal import response_bytes
from alexandria.store import personal as personal_store

# A signer's private lists: no shared cache may keep them.
PRIVATE = {"Cache-Control": "no-store"}


async def post_personal(request: Request) -> Response:
    lib = library_of(request)
    try:
        query_params(request, ())
        if lib.mirror is not None:  # personal lists are not in the log: a mirror has none
            await lib.check_writable()
        body = await read_body(request)
        cand = prepare(body, lib.genesis, kinds=PERSONAL_KINDS)
        decision = await personal_store.submit(lib.storage, cand)
    except AlexandriaError as exc:
        # a refusal may carry the signer's current lists (409 on a stale compare-and-set)
        return error_response(exc, headers=PRIVATE)
    return raw_json(response_bytes(decision.state), 201 if decision.created else 200,
                    headers=PRIVATE)


routes = [Route("/api/personal", post_personal, methods=["POST"])]
