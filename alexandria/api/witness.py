"""``alexandria witness serve``: the witness's HTTP app (C2SP ``tlog-witness``).

One route, ``POST /add-checkpoint`` (the submission prefix is the server's root).  The body is
bounded before it is read in full (413); the checks run on a worker thread since the commit
waits for an fsync.  A ``409`` answers exactly ``SIZE\\n`` as ``text/x.tlog.size`` (the spec's
wire form, what any C2SP log parses); every other refusal is the typed JSON error of PROTOCOL
§6, with the status the spec requires.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api.http import EXCEPTION_HANDLERS, read_body
from alexandria.core.tlog_witness import MAX_BODY_BYTES, SIZE_MEDIA_TYPE
from alexandria.service.witness import SizeConflict, Witness

NOTE_MEDIA_TYPE = "text/plain; charset=utf-8"


async def add_checkpoint(request: Request) -> Response:
    witness: Witness = request.app.state.witness
    body = await read_body(request, MAX_BODY_BYTES)
    try:
        lines = await asyncio.to_thread(witness.add_checkpoint, body)
    except SizeConflict as exc:
        # exactly this Content-Type: Starlette would add "; charset=utf-8" to a text/ media type
        return Response(f"{exc.size}\n", status_code=409,
                        headers={"content-type": SIZE_MEDIA_TYPE})
    return Response(lines, media_type=NOTE_MEDIA_TYPE)


def create_witness_app(witness: Witness) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            witness.state.close()

    app = Starlette(
        routes=[Route("/add-checkpoint", add_checkpoint, methods=["POST"])],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    app.state.witness = witness
    return app
