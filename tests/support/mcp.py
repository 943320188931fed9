"""Driving ``alexandria mcp`` with the ``mcp`` package's own client, over stdio, as agents do.

The server is ``python cli.py mcp --library URL`` in a child process with the participant's
``ALEXANDRIA_HOME``; the library is a live ``alexandria serve`` on 127.0.0.1.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.cli import ROOT

WRITE_TOOLS = {"validate", "publish", "follow", "unfollow", "save", "unsave", "lists",
               "whoami"}
"""The tools of a config home, served on stdio only (``whoami`` included)."""
READ_TOOLS = {"search", "get", "object", "connections", "discussion", "scores", "changes",
              "verify"}


@asynccontextmanager
async def agent(home: Path, url: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=[str(ROOT / "cli.py"), "mcp", "--library", url],
        env={"ALEXANDRIA_HOME": str(home)}, cwd=str(ROOT),
    )
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


def answer_bytes(result: Any) -> int:
    """What an answer puts in a context: its text blocks — the server's line and the
    structured content serialised (checked to be exactly that)."""
    if not result.is_error:
        assert orjson.loads(result.content[-1].text) == result.structured_content
    return sum(len(c.text.encode()) for c in result.content)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured answer; fails the test on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, arguments, result.structured_content)
    out: dict[str, Any] = result.structured_content
    return out


async def refusal(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool error's typed error document ``{error, code, details}``."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, (tool, arguments, result.structured_content)
    doc: dict[str, Any] = result.structured_content
    assert set(doc) >= {"error", "code", "details"}, doc
    assert orjson.loads(result.content[0].text) == doc
    return doc


def resolve(content: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The worked example's ``$name`` references replaced by the ids returned earlier."""
    text = orjson.dumps(content).decode()
    return dict(orjson.loads(re.sub(r'"\$([a-z]+)"', lambda m: f'"{names[m.group(1)]}"', text)))


class _Tamper(BaseHTTPRequestHandler):
    upstream = ""
    pattern = re.compile(r"^/api/entries/[0-9a-f]{64}$")

    def do_GET(self) -> None:
        r = httpx.get(self.upstream + self.path, timeout=30)
        body = r.content
        if r.status_code == 200 and self.pattern.match(self.path.split("?")[0]):
            # one byte of the title: "Claim" -> "Clbim", still valid JSON and UTF-8
            at = body.index(b'"title":"') + len(b'"title":"') + 2
            body = body[:at] + bytes([body[at] ^ 0x03]) + body[at + 1:]
        self.send_response(r.status_code)
        self.send_header("content-type", r.headers.get("content-type", "application/json"))
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on 127.0.0.1 from a thread, its URL; shut down and joined after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def tampering_proxy(upstream: str) -> Iterator[str]:
    """A server on 127.0.0.1 that passes every GET to ``upstream`` and alters one byte of
    every ``/api/entries/{rev}`` answer."""
    handler = type("Tamper", (_Tamper,), {"upstream": upstream})
    with _serving(handler) as url:
        yield url


Rewrite = Callable[[str, int, Any], Any]
"""``(path, status, answer JSON) -> answer JSON`` sent instead."""


class _Rewrite(BaseHTTPRequestHandler):
    upstream = ""
    rewrite: Rewrite

    def _forward(self, method: str) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() in ("content-type", "accept")}
        r = httpx.request(method, self.upstream + self.path, content=body, headers=headers,
                          timeout=30)
        out = r.content
        if r.headers.get("content-type", "").startswith("application/json"):
            out = orjson.dumps(type(self).rewrite(self.path.split("?")[0], r.status_code,
                                                  orjson.loads(out)))
        self.send_response(r.status_code)
        self.send_header("content-type", r.headers.get("content-type", "application/json"))
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self) -> None:
        self._forward("GET")

    def do_POST(self) -> None:
        self._forward("POST")

    def log_message(self, *_args: Any) -> None:
        pass


@contextmanager
def rewriting_proxy(upstream: str, rewrite: Rewrite) -> Iterator[str]:
    """A server on 127.0.0.1 that passes every GET and POST to ``upstream`` and answers with
    ``rewrite(path, status, answer)`` of every JSON answer: a hostile library."""
    handler = type("Rewriting", (_Rewrite,), {"upstream": upstream,
                                              "rewrite": staticmethod(rewrite)})
    with _serving(handler) as url:
        yield url
