"""The Starlette application: routes from the API modules, one table of error handlers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette

from alexandria import (
    catalogue_api,
    changes_api,
    contract_api,
    log,
    log_api,
    object_api,
    personal_api,
    read_api,
    write_api,
)
from alexandria.http import EXCEPTION_HANDLERS
from alexandria.library import Library


def create_app(library: Library, manage_lifecycle: bool = True) -> Starlette:
    """``manage_lifecycle``: open the storage on startup and close it on shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if manage_lifecycle:
            await library.open()
        try:
            async with log.background_signer(library):
                yield
        finally:
            if manage_lifecycle:
                await library.close()

    app = Starlette(
        routes=[*write_api.routes, *read_api.routes, *personal_api.routes,
                *changes_api.routes, *log_api.routes,
                *catalogue_api.routes, *object_api.routes, *contract_api.routes],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    app.state.library = library
    return app
