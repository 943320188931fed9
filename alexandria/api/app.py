"""The Starlette application: routes from the API modules, one table of error handlers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from alexandria.api import batch as batch_api
from alexandria.api import catalogue as catalogue_api
from alexandria.api import changes as changes_api
from alexandria.api import contract as contract_api
from alexandria.api import enrolment as enrolment_api
from alexandria.api import log as log_api
from alexandria.api import lookup as lookup_api
from alexandria.api import metrics as metrics_api
from alexandria.api import objects as object_api
from alexandria.api import personal as personal_api
from alexandria.api import read as read_api
from alexandria.api import write as write_api
from alexandria.api.guard import Guard, RefusalBudgets
from alexandria.api.http import EXCEPTION_HANDLERS
from alexandria.api.mcp.http import McpMount
from alexandria.api.origin import Origin
from alexandria.api.web import routes as web_routes
from alexandria.service import mirror, writer_metrics
from alexandria.service.checkpoint_signer import background_signer
from alexandria.service.library import Library
from alexandria.store import query_budget


async def authority(request: Request) -> Response:
    """``GET`` and ``POST /api/authority`` on one route: a 405 (an ``OPTIONS``, a ``PUT``)
    then names both methods in its ``Allow`` header, as the OpenAPI document does."""
    if request.method == "POST":
        return await write_api.post_authority(request)
    return await read_api.get_authority(request)


AUTHORITY = Route("/api/authority", authority, methods=["GET", "POST"])


def create_app(
    library: Library, manage_lifecycle: bool = True, origin: Origin | None = None,
    server_timing: bool = False, query_timeout_s: float | None = query_budget.DEFAULT_S,
    refusals: RefusalBudgets | None = None,
) -> Starlette:
    """``manage_lifecycle``: open the storage on startup and close it on shutdown.  ``origin``:
    what the contract and the OpenAPI document advertise (``api/origin.py``).
    ``server_timing``: pages carry ``Server-Timing`` (the operator's choice: it tells anyone
    how long the server worked on a request).  ``query_timeout_s``: each read's time budget
    (``store/query_budget.py``), None for none.  ``refusals``: each client's budget of refusals
    answered at once, beyond which they are held (``api/guard.py``; ``alexandria serve``'s
    workers have one); None: never held.  The head limit holds either way."""
    library.storage.query_timeout_s = query_timeout_s
    writer_metrics.watch(library.storage, "http")  # served by /metrics

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if manage_lifecycle:
            await library.open_when_reachable()
        try:
            async with (
                background_signer(library),
                library.cosigning.running(library.storage),
                mcp.running(app),
                mirror.following(library),
                library.monitoring(),
            ):
                yield
        finally:
            if manage_lifecycle:
                await library.close()
            metrics_api.worker_exited()

    # the read tools for agents, at /mcp (docs/mcp.md); with witnesses, their quorum is required
    trust_proxy_headers = (origin or Origin()).trust_proxy_headers
    mcp = McpMount(library.genesis, library.cosigning.policy(),
                   trust_proxy_headers=trust_proxy_headers)
    routes = [mcp.route, *write_api.routes, *batch_api.routes, *read_api.routes,
              *personal_api.routes, *changes_api.routes, *log_api.routes, *lookup_api.routes,
              AUTHORITY,
              *catalogue_api.routes, *object_api.routes, *contract_api.routes,
              *enrolment_api.routes, *metrics_api.routes, *web_routes.routes]
    app = Starlette(
        routes=routes,
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[
            Middleware(Guard, trust_proxy_headers=trust_proxy_headers, budgets=refusals),
            Middleware(metrics_api.RequestTimer, routes=routes),
        ],
        lifespan=lifespan,
    )
    # a trailing-slash redirect would send the client to an address built from its own Host
    # header; the API's paths have no trailing slash, so such a request is simply not found
    app.router.redirect_slashes = False
    app.state.library = library
    app.state.origin = origin or Origin()
    app.state.server_timing = server_timing
    return app
