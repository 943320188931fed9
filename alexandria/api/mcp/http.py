"""``/mcp`` on ``alexandria serve``: the read tools over MCP streamable HTTP.

No key lives on the server, so no write tools: an agent publishes with its own key through
``alexandria mcp`` (stdio).  Stateless and JSON answers: each POST is one self-contained
exchange, so a stranger can hold no session state on the server, and the request body is
bounded like ``POST /api/entries``'s.  The tools read the serving app itself in process
(``source.AppSource``), so their answers are the public API's bytes, checked against the
library's own genesis exactly as a remote reader would check them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.routing import Route

from alexandria.api.http import error_response, query_params
from alexandria.api.mcp.server import build_server
from alexandria.api.mcp.source import AppSource
from alexandria.api.mcp.tools import Reader, library_resources, read_tools
from alexandria.core.records import MAX_ENVELOPE_BYTES
from alexandria.core.trust import Genesis
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.errors import AlexandriaError, ServiceError

PATH = "/mcp"


class McpMount:
    """The ``/mcp`` route; ``running(app)`` binds it to the app it reads and runs the
    transport for the app's lifetime."""

    def __init__(self, genesis: Genesis, witnesses: WitnessPolicy | None = None) -> None:
        self.genesis = genesis
        self.witnesses = witnesses
        self._manager: StreamableHTTPSessionManager | None = None
        self.route = Route(PATH, self, methods=["POST"])  # self: an ASGI app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            query_params(Request(scope), ())  # no query parameters: UNKNOWN_PARAMETER, as anywhere
            if self._manager is None:  # not started (no lifespan): nothing can be served
                raise ServiceError("the MCP transport is not running", "MCP_NOT_RUNNING")
        except AlexandriaError as exc:
            await error_response(exc)(scope, receive, send)
            return
        await StreamableHTTPASGIApp(self._manager)(scope, receive, send)

    @contextlib.asynccontextmanager
    async def running(self, app: Any) -> AsyncIterator[None]:
        source = AppSource(app)
        reader = Reader(source, self.genesis, self.witnesses)
        server = build_server("alexandria", read_tools(reader), library_resources(reader))
        manager = StreamableHTTPSessionManager(
            app=server, json_response=True, stateless=True,
            max_request_body_size=MAX_ENVELOPE_BYTES,
        )
        # the manager's task group lives in a task of its own, entered and left there, so the
        # app's lifespan may start and end in different tasks (as test harnesses do)
        ready, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with manager.run():
                self._manager = manager
                ready.set()
                await stop.wait()

        task = asyncio.create_task(hold())
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            await source.aclose()
            task.result()  # raises why it could not start
        try:
            yield
        finally:
            self._manager = None
            stop.set()
            await task
            await source.aclose()
