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
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import orjson

from alexandria.core.canonical import canonical
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

TIMEOUT_SECONDS = 30.0
_HEADERS = {"accept": "application/json", "accept-encoding": "identity",
            "user-agent": "alexandria-cli"}
#: what no request line or header holds (no header injection)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: httpcore's words for a connection that ended before the first byte of an answer
_CLOSED_BEFORE_ANSWER = "without sending a response"
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


class AnswerTooLarge(Exception):
    """The answer is larger than the request's byte budget: reading stopped there."""

    def __init__(self, message: str, limit: int, read: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.read = read


class Client:
    """One library at ``base_url``, over one kept-alive connection of an ``httpx.Client``.

    What it adds to httpx is what a follower of an untrusted server needs:

    - a byte budget per answer (``max_bytes``, else ``MAX_ANSWER_BYTES``): an answer that
      declares a larger ``content-length`` is refused before its body is read, and any other is
      read as a stream and refused as soon as it passes the budget, having read at most the
      budget and one network read (64 KiB) of it (``ANSWER_TOO_LARGE``);
    - one deadline for the whole exchange (``timeout``): a server that trickles its answer a
      byte at a time cannot hold the client longer than that, however short each wait;
    - ``abort()`` from another thread, which ends the exchange in progress at once (the
      connection's socket is shut down) and refuses every later one.

    The environment is not consulted (no proxy variables, no ``.netrc``: a signing tool sends
    its envelopes only to the library it was given), nor are redirects followed; TLS trusts the
    system's certificate store, set up only for an ``https://`` library."""

    def __init__(self, base_url: str, timeout: float | None = None) -> None:
        self.base_url = check_library_url(base_url)
        self.timeout = timeout_seconds() if timeout is None else timeout
        self.max_answer_bytes = MAX_ANSWER_BYTES
        https = urlsplit(self.base_url).scheme == "https"
        # an http:// library never meets TLS: a context that trusts nothing spares loading the
        # certificate store at every command
        tls = ssl.create_default_context() if https else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._http = httpx.Client(
            headers=_HEADERS, timeout=self.timeout, verify=tls, trust_env=False,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )
        self._socket: socket.socket | None = None
        self._connected_now = False
        self._aborted = False
        self._expired = False
        #: connections opened so far, and answers read whole (a test's view of keep-alive)
        self.connections = 0
        self.answers = 0

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- ending an exchange from another thread ------------------------------------------------

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's ``trace`` extension: the socket of each connection as it opens."""
        if event == "connection.connect_tcp.complete":
            self._socket = info["return_value"].get_extra_info("socket")
            self._connected_now = True
            self.connections += 1
            if self._aborted:  # an abort() that came while connecting
                self._shut_down()

    def _shut_down(self) -> None:
        """Shut the connection's socket down (not closed: its number stays the reading
        thread's until httpx closes it), so a read blocked on a slow answer returns at once."""
        sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def abort(self) -> None:
        """End the request in progress (called from another thread): it fails at once, and so
        does every later one."""
        self._aborted = True
        self._shut_down()

    def _expire(self) -> None:
        self._expired = True
        self._shut_down()

    # --- one exchange --------------------------------------------------------------------------

    def _read(self, method: str, url: str, content: bytes | None, headers: dict[str, str],
              limit: int) -> tuple[int, str, bytes]:
        with self._http.stream(method, url, content=content, headers=headers,
                               extensions={"trace": self._trace}) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise AnswerTooLarge(f"an answer of {int(declared):,} bytes is larger than the"
                                     f" client reads ({limit:,})", limit, 0)
            body = bytearray()
            for chunk in response.iter_raw():
                body += chunk
                if len(body) > limit:
                    raise AnswerTooLarge(f"the answer is larger than the client reads"
                                         f" ({limit:,} bytes)", limit, len(body))
            return response.status_code, response.reason_phrase, bytes(body)

    def _exchange(self, method: str, target: str, content: bytes | None,
                  headers: dict[str, str], max_bytes: int | None = None,
                  ) -> tuple[int, str, bytes]:
        """One request and its whole answer, within ``timeout`` seconds in all.  A kept-alive
        connection the server has closed meanwhile fails before any answer: that attempt is
        made again, once, on a new one (resending is safe: the library answers an exact resend
        of an envelope with 200)."""
        where = f"{method} {self.base_url}{target}"
        if _CONTROL.search(target) or _CONTROL.search(method) \
                or any(_CONTROL.search(f"{k}{v}") for k, v in headers.items()):
            raise Malformed(f"{where[:200]!r}: a request holds no control character",
                            "BAD_REQUEST_TARGET")
        limit = self.max_answer_bytes if max_bytes is None else max_bytes
        for attempt in (1, 2):
            if self._aborted:
                raise Unreachable(f"{where}: the request was aborted", "CONNECTION_LOST",
                                  url=self.base_url)
            self._connected_now = False
            self._expired = False
            deadline = threading.Timer(self.timeout, self._expire)
            deadline.daemon = True
            deadline.start()
            try:
                answer = self._read(method, self.base_url + target, content, headers, limit)
                self.answers += 1
                return answer
            except AnswerTooLarge as exc:
                raise Unreachable(f"{where}: {exc}", "ANSWER_TOO_LARGE", url=self.base_url,
                                  limit=exc.limit, read=exc.read) from exc
            except httpx.HTTPError as exc:
                failure = self._failure(where, exc)
                if failure is None and attempt == 1:
                    continue
                raise failure or self._lost(where, exc) from exc
            finally:
                deadline.cancel()
        raise AssertionError("unreachable")  # pragma: no cover

    def _lost(self, where: str, exc: Exception) -> Unreachable:
        return Unreachable(f"{where}: connection lost before the answer ({exc})",
                           "CONNECTION_LOST", url=self.base_url)

    def _failure(self, where: str, exc: httpx.HTTPError) -> Unreachable | None:
        """The typed error of a failed exchange; None for a kept-alive connection found closed
        before any answer (the one case retried)."""
        reused = not self._connected_now
        if self._aborted:
            return Unreachable(f"{where}: the request was aborted", "CONNECTION_LOST",
                               url=self.base_url)
        if self._expired or isinstance(exc, httpx.TimeoutException):
            return Unreachable(f"{where}: no answer in {self.timeout:g} s", "TIMEOUT",
                               url=self.base_url)
        if isinstance(exc, httpx.ConnectError):
            cause = exc.__context__
            reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else exc
            return Unreachable(f"cannot connect to {self.base_url}: {reason}",
                               "CONNECTION_FAILED", url=self.base_url)
        closed = isinstance(exc, httpx.RemoteProtocolError) and _CLOSED_BEFORE_ANSWER in str(exc)
        if closed or isinstance(exc, (httpx.ReadError, httpx.WriteError)):
            return None if reused else self._lost(where, exc)
        return Unreachable(f"{where}: {exc}", "BAD_RESPONSE", url=self.base_url)

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
        status, reason, body = self._exchange(method, path + query, content, headers,
                                              max_bytes)
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
                # another server's layout
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
