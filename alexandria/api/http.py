"""HTTP plumbing shared by the API modules: JSON responses from stored bytes, typed errors,
bounded request bodies and strict query parameters."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from alexandria.api.status import headers_of, status_of
from alexandria.core.records import MAX_ENVELOPE_BYTES
from alexandria.errors import AlexandriaError, ClientGone, Malformed, NotFound, TooLarge, TooSlow
from alexandria.service.library import Library

log = logging.getLogger(__name__)
JSON = "application/json"
_REVISION = re.compile(r"^[0-9a-f]{64}\Z")  # "$" would accept a trailing newline


def library_of(request: Request) -> Library:
    """The library the app serves (``create_app`` keeps it in the app's state)."""
    lib: Library = request.app.state.library
    return lib


def raw_json(data: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serve stored canonical bytes as they are, never re-rendered."""
    return Response(data, status_code=status, media_type=JSON, headers=headers)


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(value), status_code=status, media_type=JSON, headers=headers)


def error_response(exc: AlexandriaError, headers: dict[str, str] | None = None) -> Response:
    """The typed error document with its status; ``Retry-After`` when the error says when to
    try again."""
    return json_response(exc.to_json(), status_of(exc), {**headers_of(exc), **(headers or {})})


async def on_alexandria_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AlexandriaError)
    return error_response(exc)


async def on_http_exception(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "HTTP_ERROR")
    body = {"error": str(exc.detail), "code": code, "details": {}}
    return json_response(body, exc.status_code, headers=dict(exc.headers or {}))


async def on_unexpected(_request: Request, exc: Exception) -> Response:
    body = {"error": "internal error", "code": "INTERNAL", "details": {}}  # the log has the rest
    return json_response(body, 500)


EXCEPTION_HANDLERS = {
    AlexandriaError: on_alexandria_error,
    HTTPException: on_http_exception,
    Exception: on_unexpected,
}


# A body has this long to arrive once its head has (the front end bounds the head:
# service/front_end.py).
# 64 KiB at a slow mobile link's 20 kB/s takes 3 s; a client that sends less holds a request
# slot for nothing.
BODY_TIMEOUT_S = 10.0


async def read_body(
    request: Request, limit: int = MAX_ENVELOPE_BYTES, timeout: float = BODY_TIMEOUT_S
) -> bytes:
    """The request body, refused with 413 as soon as it exceeds ``limit`` bytes and with 408
    when it has not all arrived ``timeout`` seconds after the handler asked for it."""
    try:
        async with asyncio.timeout(timeout):
            return await _read_body(request, limit)
    except TimeoutError:
        raise TooSlow(
            f"the request body did not arrive within {timeout:g} s", "BODY_TIMEOUT",
            limit_seconds=timeout,
        ) from None


async def _read_body(request: Request, limit: int) -> bytes:
    try:
        return await _stream_body(request, limit)
    except ClientDisconnect:
        # routine on a public server: one line, not a traceback per occurrence
        log.warning("client disconnected before sending the whole body: %s %s",
                 request.method, request.url.path)
        raise ClientGone("the client disconnected before sending the whole body") from None


async def _stream_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(
            f"request body is {declared} bytes; at most {limit}", "BODY_TOO_LARGE",
            limit=limit, actual=int(declared),
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(
                f"request body exceeds {limit} bytes", "BODY_TOO_LARGE", limit=limit
            )
        chunks.append(chunk)
    return b"".join(chunks)


def revision_param(request: Request, name: str = "revision") -> str:
    value = str(request.path_params[name])
    if not _REVISION.match(value):
        raise Malformed(
            "a revision is 64 lowercase hex characters", "BAD_REVISION", parameter=name,
            value=value[:100],
        )
    return value


def not_found(rev: str) -> NotFound:
    return NotFound(f"no revision {rev}", "UNKNOWN_REVISION", revision=rev)


def query_params(request: Request, allowed: tuple[str, ...]) -> dict[str, str]:
    """Query parameters, refusing unknown and repeated ones."""
    raw = request.scope.get("query_string")
    if not raw:  # most requests: nothing to parse
        return {}
    try:  # Starlette would put U+FFFD for bytes that are not UTF-8
        unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(
            "query parameters are percent-encoded UTF-8", "BAD_PARAMETER",
            offset=exc.start,
        ) from exc
    params = request.query_params
    out: dict[str, str] = {}
    for key in params:
        if key not in allowed:
            raise Malformed(
                f"unknown query parameter {key!r}", "UNKNOWN_PARAMETER", parameter=key,
                allowed=list(allowed),
            )
        values = params.getlist(key)
        if len(values) != 1:
            raise Malformed(f"query parameter {key!r} given twice", "REPEATED_PARAMETER",
                            parameter=key)
        out[key] = values[0]
    return out


def int_param(params: dict[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"0|[1-9][0-9]{0,15}", raw) or not lo <= int(raw) <= hi:
        raise Malformed(
            f"{name} must be an integer from {lo} to {hi}", "BAD_PARAMETER", parameter=name,
            minimum=lo, maximum=hi,
        )
    return int(raw)


def choice_param(params: dict[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = params.get(name, default)
    if raw not in allowed:
        raise Malformed(
            f"{name} must be one of {', '.join(allowed)}", "BAD_PARAMETER", parameter=name,
            allowed=list(allowed),
        )
    return raw


def bool_param(params: dict[str, str], name: str) -> bool:
    return choice_param(params, name, "false", ("true", "false")) == "true"
