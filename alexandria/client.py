"""HTTP client of a library, for the CLI (and, through ``answer_of``, the MCP tools' reads).

Two kinds of failure, because the pending-file rule depends on the difference:

- ``Unreachable``: a connection error, a timeout, a 5xx, a 408/429 or an answer that is not the
  library's JSON.  The request may or may not have been acted on; the caller keeps what it sent
  and may resend exactly the same bytes.
- a definitive rejection: any other 4xx with the library's typed error body
  ``{"error", "code", "details"}`` (PROTOCOL §6).  It is raised as the matching ``errors`` class
  (``BadRequest`` for 400, ``Forbidden`` for 403, ``ResyncRequired`` for a 409 with
  ``resync_required``…) whose ``to_json()`` is the server's document, verbatim.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from alexandria.errors import (
    AlexandriaError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ResyncRequired,
    ServiceError,
    Unprocessable,
)

TIMEOUT_SECONDS = 30.0
RETRYABLE_4XX = (408, 425, 429)


def timeout_seconds() -> float:
    """``$ALEXANDRIA_TIMEOUT`` seconds when set (slow links, tests), else 30."""
    raw = os.environ.get("ALEXANDRIA_TIMEOUT")
    try:
        value = float(raw) if raw else TIMEOUT_SECONDS
    except ValueError:
        raise BadRequest("ALEXANDRIA_TIMEOUT is a number of seconds", "BAD_TIMEOUT") from None
    if not 0 < value <= 3600:
        raise BadRequest("ALEXANDRIA_TIMEOUT is 0..3600 seconds", "BAD_TIMEOUT")
    return value


class Unreachable(ServiceError):
    """No definitive answer: whatever was sent may or may not have been acted on."""

    default_code = "UNREACHABLE"


class ServerError(AlexandriaError):
    """A definitive rejection by the library; ``to_json()`` is its error document verbatim."""

    http_status: int = 0
    document: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.document


_BY_STATUS: dict[int, type[AlexandriaError]] = {
    400: BadRequest, 403: Forbidden, 404: NotFound, 409: Conflict, 413: PayloadTooLarge,
    422: Unprocessable,
}
_SERVER_CLASSES: dict[type[AlexandriaError], type[ServerError]] = {
    base: type(f"Server{base.__name__}", (ServerError, base), {})
    for base in (*_BY_STATUS.values(), ResyncRequired, AlexandriaError)
}


def rejection(status: int, document: dict[str, Any]) -> ServerError:
    """The typed error of a library's 4xx answer."""
    base = _BY_STATUS.get(status, AlexandriaError)
    if status == 409 and document.get("resync_required") is True:
        base = ResyncRequired
    message = document.get("error")
    code = document.get("code")
    details = document.get("details")
    exc = _SERVER_CLASSES[base](
        message if isinstance(message, str) else f"HTTP {status}",
        code if isinstance(code, str) else f"HTTP_{status}",
        **(details if isinstance(details, dict) else {}),
    )
    exc.http_status = status
    exc.document = document
    return exc


def is_definitive(exc: AlexandriaError) -> bool:
    return isinstance(exc, ServerError)


@dataclass(frozen=True)
class Answer:
    status: int
    content: bytes

    def json(self) -> Any:
        return orjson.loads(self.content)


@contextlib.contextmanager
def typed_failures(base_url: str, method: str, path: str) -> Iterator[None]:
    """httpx's transport failures as ``Unreachable`` (the request may have been acted on)."""
    where = f"{method} {base_url}{path}"
    try:
        yield
    except httpx.TimeoutException as exc:
        raise Unreachable(f"{where}: no answer in time ({type(exc).__name__})", "TIMEOUT",
                          url=base_url) from exc
    except httpx.ConnectError as exc:
        raise Unreachable(f"cannot connect to {base_url}: {exc}", "CONNECTION_FAILED",
                          url=base_url) from exc
    except httpx.TransportError as exc:
        raise Unreachable(f"{where}: connection lost before the answer ({exc})",
                          "CONNECTION_LOST", url=base_url) from exc


def answer_of(r: httpx.Response, where: str) -> Answer:
    """The answer of a 2xx; typed errors otherwise (see the module docstring).  Shared by the
    synchronous ``Client`` and by asynchronous readers of the same routes."""
    if 200 <= r.status_code < 300:
        return Answer(r.status_code, r.content)
    document: Any = None
    with contextlib.suppress(orjson.JSONDecodeError):
        document = orjson.loads(r.content)
    library_error = isinstance(document, dict) and isinstance(document.get("code"), str)
    if r.status_code >= 500 or r.status_code in RETRYABLE_4XX or not library_error:
        detail = document.get("error") if library_error else r.reason_phrase
        raise Unreachable(f"{where}: HTTP {r.status_code} {detail}", "SERVER_ERROR",
                          status=r.status_code)
    raise rejection(r.status_code, document)


class Client:
    """One library at ``base_url``; a thin layer over ``httpx.Client`` that types failures."""

    def __init__(self, base_url: str, timeout: float | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        timeout = timeout_seconds() if timeout is None else timeout
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout, transport=transport,
            headers={"accept": "application/json", "user-agent": "alexandria-cli"},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- transport -----------------------------------------------------------------------------

    def request(self, method: str, path: str, params: Mapping[str, str | int] | None = None,
                content: bytes | None = None) -> Answer:
        """The answer of a 2xx; typed errors otherwise (see the module docstring)."""
        headers = {"content-type": "application/json"} if content is not None else None
        with typed_failures(self.base_url, method, path):
            r = self._http.request(method, path, params=params, content=content, headers=headers)
        return answer_of(r, f"{method} {self.base_url}{path}")

    def get(self, path: str, **params: str | int | None) -> Answer:
        clean = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, params=clean)

    def get_json(self, path: str, **params: str | int | None) -> Any:
        return self._decode(self.get(path, **params), path)

    def post(self, path: str, content: bytes, **params: str) -> Answer:
        return self.request("POST", path, params=params or None, content=content)

    def _decode(self, answer: Answer, path: str) -> Any:
        try:
            return answer.json()
        except orjson.JSONDecodeError as exc:
            raise Unreachable(f"{self.base_url}{path} answered something that is not JSON",
                              "BAD_RESPONSE") from exc

    # --- the library's routes ------------------------------------------------------------------

    def genesis(self) -> dict[str, Any]:
        value: dict[str, Any] = self.get_json("/api/genesis")
        return value

    def publish(self, envelope: bytes) -> Answer:
        """``POST /api/entries``: 201 admitted, 200 already admitted (an exact retry)."""
        return self.post("/api/entries", envelope)

    def dry_run(self, envelope: bytes) -> dict[str, Any]:
        value: dict[str, Any] = self._decode(
            self.post("/api/entries", envelope, dry_run="true"), "/api/entries"
        )
        return value

    def entry(self, rev: str, head: bool = False) -> Answer:
        return self.get(f"/api/entries/{rev}/head" if head else f"/api/entries/{rev}")

    def personal(self, envelope: bytes) -> dict[str, Any]:
        value: dict[str, Any] = self._decode(self.post("/api/personal", envelope), "/api/personal")
        return value

    def authority(self, document: Mapping[str, Any]) -> Answer:
        return self.post("/api/authority", orjson.dumps(document))
