"""Where the MCP tools read the library from: its public HTTP API, and nothing else.

``ClientSource`` (stdio) goes through the CLI's ``client.Client`` to the library's URL;
``AppSource`` (the ``/mcp`` mount) sends the same requests to the serving Starlette app in
process.  Either way the tools see exactly the bytes any reader sees, and the typed errors of
``client.answer_of``.  ``fetch`` is the synchronous form ``audit.verify`` takes; it runs on a
worker thread.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Protocol

import anyio.from_thread
import anyio.to_thread
import httpx

from alexandria.client import Client, Unreachable, answer_of

Params = Mapping[str, str | int]


class Source(Protocol):
    async def get(self, path: str, params: Params | None = None) -> bytes: ...

    def fetch(self, path: str) -> bytes: ...


class ClientSource:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def get(self, path: str, params: Params | None = None) -> bytes:
        call = functools.partial(self.client.request, "GET", path, params=params)
        answer = await anyio.to_thread.run_sync(call)
        return answer.content

    def fetch(self, path: str) -> bytes:
        return self.client.request("GET", path).content


class AppSource:
    """The serving app itself, over an in-process ASGI transport (no socket)."""

    BASE = "http://library.internal"

    def __init__(self, app: object) -> None:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        self._http = httpx.AsyncClient(transport=transport, base_url=self.BASE)

    async def get(self, path: str, params: Params | None = None) -> bytes:
        try:
            r = await self._http.get(path, params=params)
        except httpx.TransportError as exc:  # the app itself failed to answer
            raise Unreachable(f"GET {path}: no answer from the library ({exc})",
                              "CONNECTION_LOST", url=self.BASE) from exc
        return answer_of(r.status_code, r.reason_phrase, r.content, f"GET {path}").content

    def fetch(self, path: str) -> bytes:
        return anyio.from_thread.run(self.get, path)

    async def aclose(self) -> None:
        await self._http.aclose()
