"""A hostile origin on 127.0.0.1 for black-box tests of followers (``mirror``, ``restore
--catch-up``): an HTTP/1.1 server that passes requests on to a real library (``upstream``)
except on the routes a test overrides, where it answers whatever the test wants (a stream of
hundreds of MiB, a page that never advances, an answer that never finishes).  It counts the
requests of each route and the bytes it managed to send."""

from __future__ import annotations

import http.client
import socket
import socketserver
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

MiB = 1024 * 1024

#: an override: given the connection and the request target, answers (or not)
Behaviour = Callable[["Connection", str], None]


class Connection:
    """One accepted connection: what a behaviour writes goes through ``send`` (counted)."""

    def __init__(self, origin: HostileOrigin, sock: socket.socket) -> None:
        self.origin = origin
        self.sock = sock

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)
        with self.origin.lock:
            self.origin.sent += len(data)

    def answer(self, status: int, body: bytes, content_type: str = "application/json",
               reason: str = "OK") -> None:
        self.send(f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
                  f"content-length: {len(body)}\r\n\r\n".encode() + body)


class HostileOrigin:
    def __init__(self, upstream: str | None = None) -> None:
        self.upstream = urlsplit(upstream) if upstream else None
        self.routes: dict[str, Behaviour] = {}
        self.requests: Counter[str] = Counter()
        self.targets: list[str] = []
        self.sent = 0
        self.lock = threading.Lock()
        #: set to release every behaviour that waits (``stall``) when the test ends
        self.release = threading.Event()
        origin = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                origin._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            block_on_close = False

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> HostileOrigin:
        self.thread.start()
        return self

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def count(self, route: str) -> int:
        with self.lock:
            return self.requests[route]

    # --- serving ---------------------------------------------------------------------------

    def _serve(self, sock: socket.socket) -> None:
        conn = Connection(self, sock)
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                method, target, _version = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
                route = target.partition("?")[0]
                with self.lock:
                    self.requests[route] += 1
                    self.targets.append(target)
                behaviour = self.routes.get(route)
                if behaviour is not None:
                    behaviour(conn, target)
                else:
                    self._pass_on(conn, method, target)
        except OSError:
            return
        finally:
            sock.close()

    def _pass_on(self, conn: Connection, method: str, target: str) -> None:
        if self.upstream is None:
            conn.answer(404, b'{"error":"no such route","code":"NOT_FOUND","details":{}}')
            return
        upstream = http.client.HTTPConnection(self.upstream.hostname or "",
                                              self.upstream.port, timeout=30)
        try:
            upstream.request(method, target)
            response = upstream.getresponse()
            body = response.read()
            conn.answer(response.status, body,
                        response.getheader("content-type") or "application/json",
                        response.reason)
        except OSError:
            conn.answer(502, b"upstream unreachable", "text/plain", "Bad Gateway")
        finally:
            upstream.close()


@contextmanager
def hostile_origin(upstream: str | None = None) -> Iterator[HostileOrigin]:
    origin = HostileOrigin(upstream).start()
    try:
        yield origin
    finally:
        origin.close()


# --- behaviours ------------------------------------------------------------------------------


def stream(total: int = 300 * MiB, chunked: bool = True) -> Behaviour:
    """A 200 whose body runs to ``total`` bytes: chunked, or without a length (to the end of
    the connection).  Stops when the client stops reading."""

    def behave(conn: Connection, _target: str) -> None:
        framing = "transfer-encoding: chunked" if chunked else "connection: close"
        conn.send(f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}\r\n\r\n"
                  .encode())
        piece = b"{" + b" " * (64 * 1024 - 1)
        framed = f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece
        done = 0
        while done < total:
            conn.send(framed)
            done += len(piece)
        if chunked:
            conn.send(b"0\r\n\r\n")
        raise ConnectionAbortedError("done")  # closes the connection

    return behave


def constant(body: bytes, status: int = 200) -> Behaviour:
    def behave(conn: Connection, _target: str) -> None:
        conn.answer(status, body)

    return behave


def stall_when(stall: Callable[[str], bool], stalled: threading.Event) -> Behaviour:
    """Pass the request on unless ``stall(target)``: then send the head of an answer and a
    few bytes of its body, set ``stalled`` and send nothing more until the test ends."""

    def behave(conn: Connection, target: str) -> None:
        if not stall(target):
            conn.origin._pass_on(conn, "GET", target)
            return
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                  b"content-length: 100000\r\n\r\n{\"entries\":[")
        stalled.set()
        conn.origin.release.wait(120)
        raise ConnectionAbortedError("released")

    return behave


def query(target: str) -> dict[str, Any]:
    """The query parameters of ``target`` (integers where they are digits)."""
    out: dict[str, Any] = {}
    for pair in target.partition("?")[2].split("&"):
        name, _, value = pair.partition("=")
        out[name] = int(value) if value.isdigit() else value
    return out
