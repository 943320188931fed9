"""HTML responses: one Jinja2 environment, one set of security headers, one error page.

Templates autoescape everything (``select_autoescape`` for ``.html``); nothing a contributor
wrote is ever marked safe.  Every HTML response carries a strict Content-Security-Policy: no
inline script or style, no outside resource, scripts only from our own ``/static/``; pages pass
data to scripts in escaped ``data-`` attributes only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

from alexandria.api.status import headers_of, status_of
from alexandria.api.web.diffs import MAX_DIFF_LINE_CHARACTERS, MAX_DIFF_LINES
from alexandria.api.web.present import ago
from alexandria.errors import AlexandriaError

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

CSP = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
))
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}

_env = Environment(
    loader=FileSystemLoader(str(TEMPLATES)),
    autoescape=select_autoescape(("html",), default=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    auto_reload=False,
)


def short(value: str, n: int = 12) -> str:
    """The first ``n`` characters of a hex id, for display (links carry the whole id)."""
    return value[:n]


_env.filters["short"] = short
_env.filters["ago"] = ago
_env.globals["diff_limits"] = {
    "lines": f"{MAX_DIFF_LINES:,}", "characters": f"{MAX_DIFF_LINE_CHARACTERS:,}",
}

#: Threads that build pages (parsing records, diffs, templates) off the event loop, so that
#: the server goes on answering while a page renders.  One: pages take turns (``gate.py``).
RENDER_THREADS = 1
_renderer = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="page")


async def rendered(build: Callable[[], HTMLResponse]) -> HTMLResponse:
    """``build()`` run on the page thread."""
    return await asyncio.get_running_loop().run_in_executor(_renderer, build)


def page(template: str, status: int = 200, headers: dict[str, str] | None = None,
         **context: Any) -> HTMLResponse:
    html = _env.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


def error_page(exc: AlexandriaError, library: str, pin: str) -> HTMLResponse:
    """The typed error (PROTOCOL §6: error, code, details) as a page, with its status."""
    status = status_of(exc)
    return page(
        "error.html", status=status, headers=headers_of(exc), library=library, pin=pin,
        title=f"Error {status}", error=exc.to_json(),
    )
