"""Write routes: ``POST /api/entries`` (with ``?dry_run=true``) and ``POST /api/authority``
(routed beside its ``GET`` in ``app.py``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import (
    bool_param,
    json_response,
    library_of,
    query_params,
    raw_json,
    read_body,
)
from alexandria.api.metrics import WRITER_QUEUE, admission_outcome
from alexandria.rules.admission import prepare
from alexandria.store.interface import DryRun


async def post_entry(request: Request) -> Response:
    with admission_outcome() as outcome:
        response = await _post_entry(request, outcome)
    return response


async def _post_entry(request: Request, outcome: list[str]) -> Response:
    lib = library_of(request)
    dry_run = bool_param(query_params(request, ("dry_run",)), "dry_run")
    body = await read_body(request)
    cand = prepare(body, lib.genesis, index_text=True)
    with WRITER_QUEUE.track_inprogress():
        result = await lib.admit(cand, dry_run=dry_run)
    outcome.append("dry_run" if isinstance(result, DryRun) else
                   "created" if result.created else "retry")
    if isinstance(result, DryRun):
        return json_response(
            {"dry_run": True, "id": result.id, "root": result.root,
             "already_admitted": result.admitted}
        )
    return raw_json(result.signed, 201 if result.created else 200,
                    headers={"Location": f"/api/entries/{result.id}"})


async def post_authority(request: Request) -> Response:
    lib = library_of(request)
    query_params(request, ())
    body = await read_body(request)
    result = await lib.admit_authority(body)
    return json_response(result.to_json(), 201 if result.created else 200)


routes = [
    Route("/api/entries", post_entry, methods=["POST"]),
]
