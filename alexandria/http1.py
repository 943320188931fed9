"""A minimal HTTP/1.1 client connection over one socket: what ``client.Client`` sends its
requests on.

Why not ``http.client``: a CLI command lives for tens of milliseconds, and ``http.client``
imports the ``email`` package (its header parser) — more time than signing and sending take.
This module speaks only the part of HTTP/1.1 a library's JSON API needs, from the standard
library's ``socket`` alone (``ssl`` only for ``https://``):

- one request at a time on a kept-alive connection, opened on first use; a host given as an IP
  address is connected to directly (no resolver, no IDNA codec);
- answers framed by ``content-length``, ``transfer-encoding: chunked`` or the end of the
  connection; ``1xx`` interim answers skipped; ``HEAD``, ``204`` and ``304`` carry no body;
- bounded: one deadline for the whole exchange (a server that trickles bytes cannot hold the
  client longer than ``timeout``), at most ``MAX_HEAD_BYTES`` of status line and headers, at
  most ``max_body`` bytes of body (the connection's, or the request's own), checked as the
  bytes arrive: reading stops at the first byte beyond it (``AnswerTooLarge``);
- ``abort()`` from another thread ends an exchange in progress at once;
- failures as the standard library's exceptions (``TimeoutError``, ``ConnectionError`` and its
  subclasses, ``socket.gaierror``) plus ``ProtocolError``; ``ClosedBeforeAnswer`` says the
  connection ended before the first byte of an answer (a kept-alive connection the server
  closed meanwhile, which a caller may retry once on a new connection).  ``client.py`` turns
  them into the library client's typed errors.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass

#: the status line and headers of one answer, at most (a library sends a few hundred bytes)
MAX_HEAD_BYTES = 64 * 1024
#: headers of one answer, at most
MAX_HEADERS = 100
#: one chunk-size line, at most (hex digits and extensions)
MAX_CHUNK_LINE = 4096
_RECV_BYTES = 256 * 1024
_HEX_DIGITS = b"0123456789abcdefABCDEF"


class ProtocolError(OSError):
    """The peer's bytes are not an HTTP/1.1 answer this client reads."""


class AnswerTooLarge(ProtocolError):
    """The answer's body is larger than the client reads (``max_body``)."""


class ClosedBeforeAnswer(ConnectionError):
    """The connection ended before the first byte of an answer."""


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    #: header names lowercased; a repeated header keeps its values joined by ", "
    headers: dict[str, str]
    body: bytes
    #: the server closes the connection after this answer (or the body ran to its end)
    will_close: bool


def _ip_family(host: str) -> int | None:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        return family
    return None


def _clean(text: str, what: str) -> str:
    """Request text the client writes: no control characters (no header injection)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ValueError(f"{what} contains a control character")
    return text


class Connection:
    """One connection to ``host:port`` (TLS for ``tls=True``), reused while the server keeps
    it alive.  Not thread-safe: one per thread."""

    def __init__(self, host: str, port: int, *, tls: bool = False, timeout: float = 30.0,
                 max_body: int = 256 * 1024 * 1024) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.timeout = timeout
        self.max_body = max_body
        self._sock: socket.socket | None = None
        self._buffer = bytearray()
        self._deadline = 0.0
        self._limit = max_body
        self._aborted = False
        #: answers read on the current connection: 0 on a fresh one
        self.answers = 0
        #: connections opened so far (a test's view of keep-alive)
        self.opened = 0

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buffer.clear()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- connecting ----------------------------------------------------------------------------

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer in {self.timeout:g} s")
        return left

    def _connect(self) -> socket.socket:
        family = _ip_family(self.host.strip("[]"))
        if family is not None:  # an address: no resolver
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(self._remaining())
                sock.connect((self.host.strip("[]"), self.port))
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.create_connection((self.host, self.port), timeout=self._remaining())
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                import ssl  # only for https://: loading the trust store costs milliseconds

                sock.settimeout(self._remaining())
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.opened += 1
        self.answers = 0
        return sock

    # --- one exchange --------------------------------------------------------------------------

    def abort(self) -> None:
        """End the exchange in progress from another thread, and every later one: the socket
        is shut down (not closed: its number stays the reading thread's until it closes it),
        so a ``recv`` blocked on a slow answer returns at once and the request fails."""
        self._aborted = True
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _check_aborted(self) -> None:
        if self._aborted:
            self.close()
            raise ConnectionAbortedError("the request was aborted")

    def request(self, method: str, target: str, headers: dict[str, str] | None = None,
                body: bytes | None = None, max_body: int | None = None) -> Response:
        """Send one request and read its whole answer, within ``timeout`` seconds in all;
        ``max_body``: the largest body read for this answer (``self.max_body`` otherwise)."""
        self._deadline = time.monotonic() + self.timeout
        self._limit = self.max_body if max_body is None else max_body
        head = [f"{_clean(method, 'the method')} {_clean(target, 'the target')} HTTP/1.1"]
        default_port = 443 if self.tls else 80
        host = self.host if ":" not in self.host or self.host.startswith("[") \
            else f"[{self.host}]"
        head.append(f"host: {host}" if self.port == default_port else f"host: {host}:{self.port}")
        for name, value in (headers or {}).items():
            head.append(f"{_clean(name, 'a header name')}: {_clean(value, 'a header value')}")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"content-length: {len(body or b'')}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        self._check_aborted()
        if self._sock is None:
            self._sock = self._connect()
            self._check_aborted()  # an abort() that came while connecting
        sock = self._sock
        try:
            sock.settimeout(self._remaining())
            sock.sendall(data)
            response = self._read_response(method)
        except BaseException:
            self.close()
            raise
        self.answers += 1
        if response.will_close:
            self.close()
        return response

    def _read_response(self, method: str) -> Response:
        first = True
        while True:
            status, reason, version, headers = self._read_head(first)
            first = False
            if 100 <= status < 200 and status != 101:
                continue  # interim answer (100 Continue, 103 Early Hints): the real one follows
            break
        connection = headers.get("connection", "").lower()
        will_close = "close" in connection or (version == "HTTP/1.0"
                                               and "keep-alive" not in connection)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return Response(status, reason, headers, b"", will_close)
        encoding = headers.get("transfer-encoding", "").lower()
        if encoding:
            if encoding.replace(" ", "") != "chunked":
                raise ProtocolError(f"unsupported transfer-encoding {encoding[:40]!r}")
            body = self._read_chunked()
        elif "content-length" in headers:
            length = headers["content-length"]
            if not length.isdigit() or len(length) > 19:  # also refuses "1, 2": a smuggling sign
                raise ProtocolError(f"bad content-length {length[:40]!r}")
            if int(length) > self._limit:
                raise AnswerTooLarge(f"an answer of {int(length):,} bytes is larger than the"
                                     f" client reads ({self._limit:,})")
            body = self._read_exact(int(length))
        else:  # the body runs to the end of the connection
            body = self._read_to_end()
            will_close = True
        return Response(status, reason, headers, body, will_close)

    def _read_head(self, first: bool) -> tuple[int, str, str, dict[str, str]]:
        """The status line and headers; ``first``: of the first answer to the request (its
        absence is ``ClosedBeforeAnswer``)."""
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise ProtocolError(f"the answer's head is longer than {MAX_HEAD_BYTES:,} bytes")
            if not self._fill():
                if first and not self._buffer:
                    raise ClosedBeforeAnswer("the server closed the connection before answering")
                raise ProtocolError("the connection ended inside the answer's head")
        if end > MAX_HEAD_BYTES:
            raise ProtocolError(f"the answer's head is longer than {MAX_HEAD_BYTES:,} bytes")
        raw = bytes(self._buffer[:end]).decode("latin-1")
        del self._buffer[:end + 4]
        status_line, *lines = raw.split("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
        if len(lines) > MAX_HEADERS:
            raise ProtocolError(f"more than {MAX_HEADERS} headers")
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise ProtocolError(f"not a header line: {line[:80]!r}")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return int(code), reason, version, headers

    def _fill(self) -> bool:
        """Read what the socket has (waiting at most until the deadline); False at its end."""
        assert self._sock is not None
        self._sock.settimeout(self._remaining())
        try:
            chunk = self._sock.recv(_RECV_BYTES)
        except TimeoutError:
            raise TimeoutError(f"no answer in {self.timeout:g} s") from None
        self._buffer += chunk
        return bool(chunk)

    def _read_exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if not self._fill():
                raise ProtocolError(f"the connection ended {n - len(self._buffer):,} bytes"
                                    " before the end of the answer")
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def _read_line(self, limit: int) -> bytes:
        """One CRLF-terminated line of at most ``limit`` bytes (CRLF excluded)."""
        while True:
            end = self._buffer.find(b"\r\n")
            if 0 <= end <= limit:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 2]
                return line
            if end > limit or len(self._buffer) > limit + 1:
                raise ProtocolError(f"a line of a chunked answer is longer than {limit:,} bytes")
            if not self._fill():
                raise ProtocolError("the connection ended inside a chunked answer")

    def _read_chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_text = self._read_line(MAX_CHUNK_LINE).split(b";", 1)[0].strip()
            if not 0 < len(size_text) <= 16 or size_text.strip(_HEX_DIGITS):
                raise ProtocolError(f"bad chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            if len(body) + size > self._limit:
                raise AnswerTooLarge(f"the answer is larger than the client reads"
                                     f" ({self._limit:,} bytes)")
            body += self._read_exact(size)
            if self._read_line(0) != b"":
                raise ProtocolError("a chunk does not end with CRLF")
        trailer_bytes = 0
        while line := self._read_line(MAX_CHUNK_LINE):  # trailers: read and ignored
            trailer_bytes += len(line)
            if trailer_bytes > MAX_HEAD_BYTES:
                raise ProtocolError("the answer's trailers are too long")
        return bytes(body)

    def _read_to_end(self) -> bytes:
        while True:
            if len(self._buffer) > self._limit:
                raise AnswerTooLarge(f"the answer is larger than the client reads"
                                     f" ({self._limit:,} bytes)")
            if not self._fill():
                break
        data = bytes(self._buffer)
        self._buffer.clear()
        return data
