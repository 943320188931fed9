"""``/mcp`` on ``alexandria serve``: the read tools over MCP streamable HTTP.

No key lives on the server, so no write tools: an agent publishes with its own key through
``alexandria mcp`` (stdio).  Stateless and JSON answers: each POST is one self-contained
exchange, so a stranger can hold no session state on the server, and the request body is
bounded like ``POST /api/entries``'s.  The tools read the serving app itself in process
(``source.AppSource``), so their answers are the public API's bytes, checked against the
library's own genesis exactly as a remote reader would check them.

Anyone may call, so a call's cost is bounded twice over.  What a record's checks found is
remembered (``checks.Verifier``: per record served and per checkpoint), so the same proofs are
not recomputed for every stranger asking.  And ``tools/call`` requests run at most
``CALLS_PER_CLIENT`` at once per client address (``api/client_address.py``: an IPv6 client
by its /64, the proxy's forwarded address with ``serve --trust-proxy-headers``), ``CALLS`` at
once in all, and all together within ``SHARE`` of the time (per worker process): beyond that a
call is answered at once, before any work, ``429 CLIENT_BUSY`` or ``503 SERVER_BUSY`` with
``Retry-After``.  The body is read (bounded, with the body timeout) before a place is taken, so
a slow sender holds none.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Message

from alexandria.api.client_address import client_address
from alexandria.api.http import error_response, query_params, read_body
from alexandria.api.mcp.server import build_server
from alexandria.api.mcp.source import AppSource
from alexandria.api.mcp.tools import Reader, library_resources, read_tools
from alexandria.api.metrics import MCP_CALLS, MCP_VERIFICATIONS
from alexandria.core.records import MAX_ENVELOPE_BYTES
from alexandria.core.trust import Genesis
from alexandria.core.witness_policy import WitnessPolicy
from alexandria.errors import AlexandriaError, ClientBusy, Failed, ServerBusy

PATH = "/mcp"
CALLS_PER_CLIENT = 1
"""Tool calls one client address may have running at once (a proof search costs up to a few
hundred milliseconds of CPU when nothing of it is remembered yet)."""
CALLS = 2
"""Tool calls running at once in one worker process, all clients together."""
SHARE = 0.1
"""The share of a worker's time tool calls may take, all together, measured as the time each
takes: beyond it calls wait their turn (``SERVER_BUSY``) until the budget has refilled.  The
checks run in the process that also serves every other route, so this — not the number of
calls at once — is what keeps ordinary reads and admissions fast under a flood of calls."""
BURST_S = 1.0
"""The budget a quiet worker holds: one second of calls at once."""
RETRY_AFTER_S = 1


class CallLimits:
    """Places for tool calls: ``per_client`` at once per client address, ``total`` at once
    in all, and together at most ``share`` of the time (a budget of ``burst`` seconds,
    refilled at ``share`` seconds a second, each call charged the time it took).  One event
    loop takes and gives them back, so plain counters suffice."""

    def __init__(self, per_client: int = CALLS_PER_CLIENT, total: int = CALLS,
                 share: float = SHARE, burst: float = BURST_S) -> None:
        self.per_client = per_client
        self.total = total
        self.share = share
        self.burst = burst
        self._running: dict[str, int] = {}
        self._all = 0
        self._budget = burst
        self._refilled = time.monotonic()

    def _refill(self, now: float) -> float:
        self._budget = min(self.burst, self._budget + (now - self._refilled) * self.share)
        self._refilled = now
        return self._budget

    @contextlib.contextmanager
    def place(self, client: str) -> Iterator[None]:
        if self._running.get(client, 0) >= self.per_client:
            raise ClientBusy(
                f"this client already has as many MCP tool calls running as one client may"
                f" ({self.per_client}); retry after {RETRY_AFTER_S} s", limit=self.per_client,
                retry_after=RETRY_AFTER_S)
        if self._all >= self.total:
            raise ServerBusy(
                f"the server already runs as many MCP tool calls as it takes at once"
                f" ({self.total}); retry after {RETRY_AFTER_S} s", limit=self.total,
                retry_after=RETRY_AFTER_S)
        start = time.monotonic()
        budget = self._refill(start)
        if budget < 0:
            wait = max(RETRY_AFTER_S, math.ceil(-budget / self.share))
            raise ServerBusy(
                f"MCP tool calls have taken their share of the server's time"
                f" ({self.share:.0%}); retry after {wait} s", limit=self.total, share=self.share,
                retry_after=wait)
        self._running[client] = self._running.get(client, 0) + 1
        self._all += 1
        try:
            yield
        finally:
            end = time.monotonic()
            self._refill(end)
            self._budget -= end - start
            self._all -= 1
            left = self._running[client] - 1
            if left:
                self._running[client] = left
            else:
                del self._running[client]


def _replay(body: bytes, receive: Any) -> Any:
    """``receive`` for the transport: the body already read, then the connection's events."""
    replayed = False

    async def again() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: Message = await receive()
        return message

    return again


def _is_tool_call(body: bytes) -> bool:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False  # the transport refuses it, at no cost
    return isinstance(message, dict) and message.get("method") == "tools/call"


class McpMount:
    """The ``/mcp`` route; ``running(app)`` binds it to the app it reads and runs the
    transport for the app's lifetime."""

    def __init__(self, genesis: Genesis, witnesses: WitnessPolicy | None = None,
                 limits: CallLimits | None = None, trust_proxy_headers: bool = False) -> None:
        self.genesis = genesis
        self.witnesses = witnesses
        self.limits = limits or CallLimits()
        self.trust_proxy_headers = trust_proxy_headers  # whose address a call is counted to
        self._manager: StreamableHTTPSessionManager | None = None
        self.route = Route(PATH, self, methods=["POST"])  # self: an ASGI app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        client, _shown = client_address(request, self.trust_proxy_headers)
        with contextlib.ExitStack() as held:
            try:
                query_params(request, ())  # no query parameters: UNKNOWN_PARAMETER, as anywhere
                if self._manager is None:  # not started (no lifespan): nothing can be served
                    raise Failed("the MCP transport is not running", "MCP_NOT_RUNNING")
                body = await read_body(request)  # 413 and 408 as POST /api/entries
                if _is_tool_call(body):
                    held.enter_context(self.limits.place(client))
            except AlexandriaError as exc:
                retry = None
                if isinstance(exc, (ClientBusy, ServerBusy)):
                    MCP_CALLS.labels(exc.code).inc()
                    retry = {"Retry-After": str(exc.details["retry_after"])}
                await error_response(exc, retry)(scope, receive, send)
                return
            await StreamableHTTPASGIApp(self._manager)(scope, _replay(body, receive), send)

    @contextlib.asynccontextmanager
    async def running(self, app: Any) -> AsyncIterator[None]:
        source = AppSource(app)
        reader = Reader(source, self.genesis, self.witnesses,
                        counted=lambda step: MCP_VERIFICATIONS.labels(step).inc())
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
