"""HTTP client of a library, for the CLI (and, through ``answer_of``, the MCP tools' reads).

Two kinds of failure, because the pending-file rule depends on the difference:

- ``Unreachable``: a connection error, a timeout, a 5xx, a 408/429 or an answer that is not the
  library's JSON.  The request may or may not have been acted on; the caller keeps what it sent
  and may resend exactly the same bytes.
- a definitive rejection: any other 4xx with the library's typed error body
  ``{"error", "code", "details"}`` (PROTOCOL §6).  It is raised as the matching ``errors`` class
  (``Malformed`` for 400, ``NotPermitted`` for 403, ``ResyncRequired`` for a 409 with
  ``resync_required``…) whose ``to_json()`` is the server's document, verbatim.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson

from alexandria.errors import (
    AlexandriaError,
    Conflict,
    Failed,
    Invalid,
    Malformed,
    NotFound,
    NotPermitted,
    Refused,
    ResyncRequired,
    TooLarge,
)
from alexandria.http1 import AnswerTooLarge, ClosedBeforeAnswer, Connection, ProtocolError

TIMEOUT_SECONDS = 30.0
_HEADERS = {"accept": "application/json", "user-agent": "alexandria-cli"}
#: set by ``alexandria -v``: called with one line per request (method, URL, status, time)
TRACE: Callable[[str], None] | None = None
RETRYABLE_4XX = (408, 425, 429)


def timeout_seconds() -> float:
    """``$ALEXANDRIA_TIMEOUT`` seconds when set (slow links, tests), else 30."""
    raw = os.environ.get("ALEXANDRIA_TIMEOUT")
    try:
        value = float(raw) if raw else TIMEOUT_SECONDS
    except ValueError:
        raise Malformed("ALEXANDRIA_TIMEOUT is a number of seconds", "BAD_TIMEOUT") from None
    if not 0 < value <= 3600:
        raise Malformed("ALEXANDRIA_TIMEOUT is 0..3600 seconds", "BAD_TIMEOUT")
    return value


class Unreachable(Failed):
    """No definitive answer: whatever was sent may or may not have been acted on."""

    default_code = "UNREACHABLE"


class ServerError(Refused):
    """A definitive rejection by the library; ``to_json()`` is its error document verbatim."""

    http_status: int = 0
    document: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.document


_BY_STATUS: dict[int, type[AlexandriaError]] = {
    400: Malformed, 403: NotPermitted, 404: NotFound, 409: Conflict, 413: TooLarge,
    422: Invalid,
}
_SERVER_CLASSES: dict[type[AlexandriaError], type[ServerError]] = {
    base: type(f"Server{base.__name__}", (ServerError, base), {})
    for base in (*_BY_STATUS.values(), ResyncRequired, Refused)
}


def rejection(status: int, document: dict[str, Any]) -> ServerError:
    """The typed error of a library's 4xx answer."""
    base = _BY_STATUS.get(status, Refused)
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


def answer_of(status: int, reason: str, body: bytes, where: str) -> Answer:
    """The answer of a 2xx; typed errors otherwise (see the module docstring).  Shared by
    ``Client`` and by the MCP server's in-process reader of the same routes."""
    if 200 <= status < 300:
        return Answer(status, body)
    document: Any = None
    with contextlib.suppress(orjson.JSONDecodeError):
        document = orjson.loads(body)
    library_error = isinstance(document, dict) and isinstance(document.get("code"), str)
    if status >= 500 or status in RETRYABLE_4XX or not library_error:
        detail = document.get("error") if library_error else reason
        retry = document.get("details", {}).get("retry_after") if library_error \
            and isinstance(document.get("details"), dict) else None
        hint = {"retry_after": retry} if isinstance(retry, int) and retry >= 0 else {}
        raise Unreachable(f"{where}: HTTP {status} {detail}", "SERVER_ERROR", status=status,
                          **hint)
    raise rejection(status, document)


def is_definitive(exc: AlexandriaError) -> bool:
    return isinstance(exc, ServerError)


@dataclass(frozen=True)
class Answer:
    status: int
    content: bytes

    def json(self) -> Any:
        return orjson.loads(self.content)


#: the largest answer the client reads: a library's pages are far smaller; a misbehaving server
#: cannot make the CLI hold more than this in memory
MAX_ANSWER_BYTES = 256 * 1024 * 1024
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#@\s]*)@")


def redact_url(text: str) -> str:
    """``text`` with the credentials of every ``scheme://user:password@`` replaced by ``***``,
    so that a password typed into a URL is never echoed, logged or kept."""
    return _USERINFO.sub(lambda m: f"{m.group(1)}***@", text)


def has_credentials(text: str) -> bool:
    return _USERINFO.search(text) is not None


def check_library_url(url: str) -> str:
    """A library URL the client can use: ``http(s)://host[:port][/prefix]``, no credentials
    (they would be sent in the clear and kept in the configuration).  The address of its API
    (``…/api``, ``…/api/``), which every request path already starts with, is taken as the
    library's own: a URL copied from a browser's ``/api/…`` address works."""
    if has_credentials(url):
        raise Malformed(f"{redact_url(url)}: a library URL carries no user name or password",
                        "CREDENTIALS_IN_URL", url=redact_url(url))
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.query or parts.fragment:
        raise Malformed(f"{url[:200]!r} is not a library URL (http://HOST[:PORT])", "BAD_URL",
                        url=url[:200])
    base = url.rstrip("/")
    return base.removesuffix("/api") if parts.path.rstrip("/").endswith("/api") else base


class Client:
    """One library at ``base_url``, over one kept-alive HTTP/1.1 connection (``http1.py``).

    Not httpx, nor the standard library's ``http.client``: a CLI command lives for tens of
    milliseconds, and importing either (httpx's TLS set-up, ``http.client``'s ``email``
    parser) cost more than signing and sending.  TLS is set up only for ``https://``."""

    def __init__(self, base_url: str, timeout: float | None = None) -> None:
        self.base_url = check_library_url(base_url)
        self.timeout = timeout_seconds() if timeout is None else timeout
        parts = urlsplit(self.base_url)
        https = parts.scheme == "https"
        self._prefix = parts.path.rstrip("/")
        self._conn = Connection(parts.hostname or "", parts.port or (443 if https else 80),
                                tls=https, timeout=self.timeout, max_body=MAX_ANSWER_BYTES)

    def close(self) -> None:
        self._conn.close()

    def abort(self) -> None:
        """End the request in progress (called from another thread): it fails at once."""
        self._conn.abort()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _exchange(self, method: str, target: str, content: bytes | None,
                  headers: dict[str, str], max_bytes: int | None = None,
                  ) -> tuple[int, str, bytes]:
        """One request and its whole answer.  A kept-alive connection the server has closed
        meanwhile fails before any answer: that attempt is made again, once, on a new one
        (resending is safe: the library answers an exact resend of an envelope with 200)."""
        where = f"{method} {self.base_url}{target}"
        for attempt in (1, 2):
            reused = self._conn.connected and self._conn.answers > 0
            try:
                response = self._conn.request(method, target, headers, content, max_bytes)
                return response.status, response.reason, response.body
            except ValueError as exc:
                raise Malformed(f"{where[:200]}: {exc}", "BAD_REQUEST_TARGET") from exc
            except TimeoutError as exc:
                raise Unreachable(f"{where}: no answer in {self.timeout:g} s", "TIMEOUT",
                                  url=self.base_url) from exc
            except (ClosedBeforeAnswer, BrokenPipeError, ConnectionResetError) as exc:
                if reused and attempt == 1:
                    continue
                raise Unreachable(f"{where}: connection lost before the answer ({exc})",
                                  "CONNECTION_LOST", url=self.base_url) from exc
            except (ConnectionRefusedError, socket.gaierror) as exc:
                raise Unreachable(f"cannot connect to {self.base_url}: {exc.strerror or exc}",
                                  "CONNECTION_FAILED", url=self.base_url) from exc
            except AnswerTooLarge as exc:
                raise Unreachable(f"{where}: {exc}", "ANSWER_TOO_LARGE",
                                  url=self.base_url) from exc
            except ProtocolError as exc:
                raise Unreachable(f"{where}: {exc}", "BAD_RESPONSE", url=self.base_url) from exc
            except OSError as exc:
                code = "CONNECTION_LOST" if reused else "CONNECTION_FAILED"
                raise Unreachable(f"{where}: {exc}", code, url=self.base_url) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def request(self, method: str, path: str, params: Mapping[str, str | int] | None = None,
                content: bytes | None = None, headers: Mapping[str, str] | None = None,
                max_bytes: int | None = None) -> Answer:
        """The answer of a 2xx; typed errors otherwise (see the module docstring).
        ``max_bytes``: the largest answer read (``MAX_ANSWER_BYTES`` otherwise); a larger one
        is ``Unreachable`` with code ``ANSWER_TOO_LARGE``, its reading stopped at the cap."""
        headers = {**_HEADERS, **(headers or {})}
        if content is not None:
            headers.setdefault("content-type", "application/json")
        query = f"?{urlencode(params)}" if params else ""
        started = time.perf_counter()
        status, reason, body = self._exchange(method, self._prefix + path + query, content,
                                              headers, max_bytes)
        if TRACE is not None:
            TRACE(f"{method} {self.base_url}{path}{query} -> {status}, {len(body)} bytes in"
                  f" {(time.perf_counter() - started) * 1000:.1f} ms")
        try:
            return answer_of(status, reason, body, f"{method} {self.base_url}{path}")
        except ServerError as exc:
            if status == 404 and exc.code == "NOT_FOUND" and not exc.details \
                    and exc.message == "Not Found":
                # the framework's own 404: no such route, so the URL is not a library's base
                exc.message = (f"{method} {self.base_url}{path}: {exc.message} — nothing at"
                               f" {self.base_url} answers as a library: give the library's"
                               " base address (http://HOST[:PORT], without /api or another"
                               " path)")
                exc.details["library"] = self.base_url
            raise

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

    def publish_batch(self, envelopes: Sequence[bytes]) -> list[tuple[int, Any, bytes]]:
        """``POST /api/entries/batch`` (PROTOCOL §4.1): one ``(status, body, body bytes)`` per
        envelope, in order, each what ``POST /api/entries`` would have answered for it alone.
        The body bytes are the signed record as the library stores it (JCS) when the line
        carries it verbatim, else the JCS of the parsed body.  The envelopes are canonical
        JSON, so none holds a newline.  A whole-request refusal raises as ``request`` does; an
        answer that does not hold one result per envelope is ``Unreachable``."""
        answer = self.request("POST", "/api/entries/batch", content=b"\n".join(envelopes),
                              headers={"content-type": "application/x-ndjson",
                                       "accept": "application/x-ndjson"})
        out: list[tuple[int, Any, bytes]] = []
        try:
            for line in answer.content.splitlines():
                if line.startswith(b'{"status":') and line[13:21] == b',"body":' \
                        and line.endswith(b"}") and line[10:13].isdigit():
                    raw = line[21:-1]
                    out.append((int(line[10:13]), orjson.loads(raw), raw))
                    continue
                from alexandria.core.canonical import canonical  # another server's layout

                value = orjson.loads(line)
                status, body = value["status"], value["body"]
                if not isinstance(status, int):
                    raise TypeError(status)
                out.append((status, body, canonical(body)))
        except (orjson.JSONDecodeError, AlexandriaError, KeyError, TypeError) as exc:
            raise Unreachable(f"{self.base_url}/api/entries/batch answered something that is"
                              " not a batch result", "BAD_RESPONSE") from exc
        if len(out) != len(envelopes):
            raise Unreachable(f"{self.base_url}/api/entries/batch answered {len(out)} results"
                              f" for {len(envelopes)} envelopes", "BAD_RESPONSE")
        return out

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
