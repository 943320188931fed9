"""Routes of the verifiable log (PROTOCOL §7); the domain is in ``log.py``, the wire shapes are
documented in ``docs/log.md``.  Hashes in JSON are lowercase hex (PROTOCOL §1); only the
checkpoint note carries its root in base64, as C2SP requires."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import int_param, json_response, library_of, query_params, raw_json
from alexandria.errors import Malformed
from alexandria.reads import log

_INT = re.compile(r"0|[1-9][0-9]{0,15}")


def _ints(request: Request, *names: str) -> list[int]:
    """Required non-negative integer query parameters, nothing else."""
    params = query_params(request, names)
    out = []
    for name in names:
        raw = params.get(name)
        if raw is None:
            raise Malformed(f"query parameter {name} is required", "MISSING_PARAMETER",
                            parameter=name)
        if not _INT.fullmatch(raw):
            raise Malformed(f"{name} must be a non-negative decimal integer", "BAD_PARAMETER",
                            parameter=name)
        out.append(int(raw))
    return out


async def get_checkpoint(request: Request) -> Response:
    query_params(request, ())
    library = library_of(request)
    newest = await library.checkpoints.current()
    cosigning = library.cosigning
    note = await library.storage.read(lambda conn: log.served_checkpoint(
        conn, newest, cosigning.vkeys, cosigning.quorum))
    return Response(note, media_type="text/plain; charset=utf-8",
                    headers={"Cache-Control": "no-cache"})


async def get_checkpoints(request: Request) -> Response:
    after = int_param(query_params(request, ("after",)), "after", 0, 0, 2**53 - 1)
    body = await library_of(request).storage.read(lambda conn: log.checkpoints_page(conn, after))
    return raw_json(body)


async def get_entries(request: Request) -> Response:
    start, end = _ints(request, "start", "end")
    body = await library_of(request).storage.read(lambda conn: log.entries_page(conn, start, end))
    return raw_json(body)


async def get_inclusion(request: Request) -> Response:
    index, size = _ints(request, "index", "size")
    proof = await library_of(request).storage.read(
        lambda conn: log.inclusion_proof(conn, index, size)
    )
    return json_response({"index": index, "proof": [h.hex() for h in proof], "size": size})


async def get_consistency(request: Request) -> Response:
    old, new = _ints(request, "old", "new")
    proof = await library_of(request).storage.read(
        lambda conn: log.consistency_proof(conn, old, new)
    )
    return json_response({"new": new, "old": old, "proof": [h.hex() for h in proof]})


routes = [
    Route("/api/log/checkpoint", get_checkpoint, methods=["GET"]),
    Route("/api/log/checkpoints", get_checkpoints, methods=["GET"]),
    Route("/api/log/entries", get_entries, methods=["GET"]),
    Route("/api/log/proof/inclusion", get_inclusion, methods=["GET"]),
    Route("/api/log/proof/consistency", get_consistency, methods=["GET"]),
]
