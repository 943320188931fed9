"""The CLI's HTTP client (``client.Client``, over httpx): against a real ``alexandria serve`` on
127.0.0.1 (keep-alive, the library's answers and errors) and against a scripted server on
127.0.0.1 that answers byte for byte what each test needs (chunked and long answers, a closed
kept-alive connection, a trickling or silent server, answers over their byte budget, broken
framing).  The tests against the library run on each backend (``new_db``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from alexandria.audit.answer_caps import CHECKPOINT_BYTES
from alexandria.audit.export import HttpSource
from alexandria.client import Client, ServerError, Unreachable
from alexandria.errors import AlexandriaError
from alexandria.service.bootstrap import Founding
from tests.support.liveserver import NewDb, Server, serving, write_library_files
from tests.support.loopback import accept_forever, content_length

#: what the client may read past a budget before it refuses the answer: one network read
ONE_READ = 64 * 1024

# --- against the library ----------------------------------------------------------------------


@pytest.fixture
def library(tmp_path: Path, founding: Founding, new_db: NewDb) -> Iterator[Server]:
    genesis, log_key = write_library_files(founding, tmp_path)
    with serving(genesis, new_db(tmp_path / "lib.db"), log_key) as server:
        yield server


def test_requests_to_the_library_share_one_kept_alive_connection(library: Server,
                                                                   founding: Founding) -> None:
    with Client(library.url) as client:
        assert client.genesis()["document"] == founding.genesis_document
        for _ in range(5):
            assert client.get("/api/genesis").status == 200
        assert client.connections == 1 and client.answers == 6


def test_the_library_s_typed_errors_come_back_verbatim(library: Server) -> None:
    with Client(library.url) as client:
        with pytest.raises(ServerError) as exc:
            client.entry("0" * 64)
        assert exc.value.http_status == 404 and exc.value.to_json()["code"] == "UNKNOWN_REVISION"
        with pytest.raises(ServerError) as exc:
            client.publish(b"{not json")
        assert exc.value.http_status == 400
        # the connection survives answers that are errors
        assert client.get("/api/genesis").status == 200
        assert client.connections == 1


def test_a_stopped_library_is_unreachable_with_connection_failed(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", timeout=5) as client, \
            pytest.raises(Unreachable) as exc:
        client.genesis()
    assert exc.value.code == "CONNECTION_FAILED"


# --- against a scripted server ----------------------------------------------------------------

Handler = Callable[[socket.socket, bytes], bool]


class Scripted:
    """A server on 127.0.0.1 whose connections each run ``handler(conn, request_bytes)`` once per
    request read (the head and a ``content-length`` body); the handler returns False to close
    the connection.  ``requests`` records what arrived, ``connections`` how many were made."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        accept_forever(self.sock, self._connection, self._counted)

    def _counted(self) -> None:
        self.connections += 1

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    try:
                        chunk = conn.recv(65536)
                    except OSError:
                        return
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = content_length(head)
                while len(data) < length:
                    data += conn.recv(65536)
                request, data = head + b"\r\n\r\n" + data[:length], data[length:]
                self.requests.append(request)
                try:
                    if not self.handler(conn, request):
                        return
                except OSError:
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def scripted() -> Iterator[Callable[[Handler], Scripted]]:
    servers: list[Scripted] = []

    def start(handler: Handler) -> Scripted:
        servers.append(Scripted(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _json(conn: socket.socket, status: int, value: object, extra: bytes = b"") -> None:
    body = orjson.dumps(value)
    conn.sendall(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s"
                 b"\r\n%s" % (status, len(body), extra, body))


def test_keep_alive_and_what_the_request_carries(scripted: Callable[[Handler], Scripted]) -> None:
    server = scripted(lambda conn, _req: _json(conn, 200, {"ok": True}) or True)
    with Client(server.url + "/prefix") as client:
        assert client.get_json("/api/genesis", q="a b") == {"ok": True}
        assert client.post("/api/entries", b'{"x":1}').json() == {"ok": True}
    assert server.connections == 1
    get, post = (request.lower() for request in server.requests)  # header names' case aside
    assert get.startswith(b"get /prefix/api/genesis?q=a+b http/1.1\r\n")
    assert f"host: 127.0.0.1:{server.port}\r\n".encode() in get
    assert b"accept: application/json\r\n" in get and b"content-length" not in get
    assert post.startswith(b"post /prefix/api/entries http/1.1\r\n")
    assert b"content-length: 7\r\n" in post and post.endswith(b"\r\n\r\n{\"x\":1}")


def test_chunked_answers_with_extensions_and_trailers(
        scripted: Callable[[Handler], Scripted]) -> None:
    body = orjson.dumps({"text": "é" * 50_000})

    def handler(conn: socket.socket, _req: bytes) -> bool:
        out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        for i in range(0, len(body), 7_001):
            part = body[i:i + 7_001]
            out += b"%x;ext=1\r\n%s\r\n" % (len(part), part)
        conn.sendall(out + b"0\r\nx-trailer: yes\r\n\r\n")
        return True

    server = scripted(handler)
    with Client(server.url) as client:
        for _ in range(3):  # the connection stays usable after each chunked answer
            assert client.get("/x").content == body
    assert server.connections == 1


def test_a_long_answer_arriving_in_pieces(scripted: Callable[[Handler], Scripted]) -> None:
    body = bytes(range(256)) * 20_000  # 5 MB

    def handler(conn: socket.socket, _req: bytes) -> bool:
        data = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        for i in range(0, len(data), 1_000_003):
            conn.sendall(data[i:i + 1_000_003])
            time.sleep(0.01)
        return True

    server = scripted(handler)
    with Client(server.url, timeout=10) as client:
        assert client.get("/").content == body


def test_interim_answers_are_skipped_and_bodiless_answers_read_nothing(
        scripted: Callable[[Handler], Scripted]) -> None:
    def handler(conn: socket.socket, req: bytes) -> bool:
        if req.startswith(b"HEAD"):
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n")
        elif req.startswith(b"DELETE"):
            conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
        else:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: x\r\n"
                         b"\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok")
        return True

    server = scripted(handler)
    with Client(server.url) as client:
        assert client.post("/", b"").status == 201
        assert client.request("HEAD", "/").content == b""
        assert client.request("DELETE", "/").status == 204
        assert client.get("/").content == b"ok" and client.connections == 1


def test_an_answer_to_the_end_of_the_connection_and_connection_close(
        scripted: Callable[[Handler], Scripted]) -> None:
    def handler(conn: socket.socket, req: bytes) -> bool:
        if b"/close" in req:
            _json(conn, 200, [1], b"connection: close\r\n")
        else:
            conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
        return False

    server = scripted(handler)
    with Client(server.url) as client:
        assert client.get("/").content == b"until the end"
        assert client.get("/close").content == b"[1]"
        assert client.get("/").content == b"until the end"
        assert client.connections == server.connections == 3


def test_a_kept_alive_connection_closed_meanwhile_is_retried_once(
        scripted: Callable[[Handler], Scripted]) -> None:
    """The server closes a kept-alive connection without saying so, while idle or as the
    next request arrives: that request is sent again on a new connection (an envelope's
    resend is idempotent: 200 with the stored record)."""
    answered: set[socket.socket] = set()

    def handler(conn: socket.socket, req: bytes) -> bool:
        if b"/idle" in req:
            return _json(conn, 200, {"n": len(server.requests)}) and False
        if conn in answered:
            return False  # the second request on a connection: closed without an answer
        answered.add(conn)
        return _json(conn, 200, {"n": len(server.requests)}) or True

    server = scripted(handler)
    with Client(server.url) as client:
        assert client.get_json("/idle") == {"n": 1}
        time.sleep(0.05)
        assert client.get_json("/a") == {"n": 2}
        assert client.get_json("/b") == {"n": 4}  # the third request was closed unanswered
    assert server.connections == 3 and len(server.requests) == 4


def test_a_fresh_connection_closed_before_the_answer_is_connection_lost(
        scripted: Callable[[Handler], Scripted]) -> None:
    """Not retried: the server may have acted on the request (the pending-file rule keeps the
    envelope and ``retry`` resends it)."""
    server = scripted(lambda _conn, _req: False)
    with Client(server.url) as client, pytest.raises(Unreachable) as exc:
        client.publish(b"{}")
    assert exc.value.code == "CONNECTION_LOST" and len(server.requests) == 1


def test_one_deadline_for_the_whole_exchange(scripted: Callable[[Handler], Scripted]) -> None:
    """A server that trickles its answer a byte at a time cannot hold the client longer than
    its timeout, in its head or in its body; nor can one that never answers."""
    def trickle(answer: bytes) -> Handler:
        def handler(conn: socket.socket, _req: bytes) -> bool:
            for byte in answer:
                conn.sendall(bytes([byte]))
                time.sleep(0.01)
            return True
        return handler

    head = b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"x" * 1000 + b"\r\n\r\n"
    body = b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n" + b"x" * 1000
    for handler in (trickle(head), trickle(body), lambda _conn, _req: time.sleep(3) or True):
        server = scripted(handler)
        started = time.monotonic()
        with Client(server.url, timeout=0.5) as client, pytest.raises(Unreachable) as exc:
            client.get("/")
        assert exc.value.code == "TIMEOUT"
        assert time.monotonic() - started < 1.5


def test_abort_from_another_thread_ends_the_exchange_at_once(
        scripted: Callable[[Handler], Scripted]) -> None:
    """What a cancelled catch-up relies on: a silent server does not hold the thread."""
    server = scripted(lambda _conn, _req: time.sleep(5) or True)
    with Client(server.url, timeout=30) as client:
        threading.Timer(0.2, client.abort).start()
        started = time.monotonic()
        with pytest.raises(Unreachable) as exc:
            client.get("/")
        assert time.monotonic() - started < 2 and "aborted" in exc.value.message
        with pytest.raises(Unreachable):  # and every later request
            client.get("/")
    assert len(server.requests) == 1


def _endless(conn: socket.socket, req: bytes) -> bool:
    """An answer that never ends: declared too large, chunked or to the end of the
    connection, 16 KiB at a time until the client goes away."""
    piece = b"x" * 16384
    if b"/declared" in req:
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n")
    elif b"/chunked" in req:
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        piece = b"4000\r\n" + piece + b"\r\n"
    else:
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        conn.sendall(piece)
    return False


@pytest.mark.parametrize("path", ["/declared", "/chunked", "/end"])
def test_an_answer_over_its_budget_is_refused_having_read_at_most_the_budget(
        scripted: Callable[[Handler], Scripted], path: str) -> None:
    server = scripted(_endless)
    with Client(server.url, timeout=10) as client:
        started = time.monotonic()
        with pytest.raises(Unreachable) as exc:
            client.request("GET", path, max_bytes=100_000)
        assert exc.value.code == "ANSWER_TOO_LARGE" and exc.value.details["limit"] == 100_000
        read = exc.value.details["read"]
        assert read == 0 if path == "/declared" else 100_000 < read <= 100_000 + ONE_READ
        assert time.monotonic() - started < 5  # refused at once, not at the end of the answer
        client.max_answer_bytes = 50_000  # the client's own budget, for a request without one
        with pytest.raises(Unreachable) as exc:
            client.get(path)
        assert exc.value.code == "ANSWER_TOO_LARGE" and exc.value.details["limit"] == 50_000


def test_a_follower_reads_a_route_no_further_than_its_cap(
        scripted: Callable[[Handler], Scripted]) -> None:
    """The mirror's and the catch-up's source: each route capped as ``answer_caps`` says."""
    server = scripted(_endless)
    source = HttpSource(server.url + "/end")
    try:
        with pytest.raises(Unreachable) as exc:
            source("/api/log/checkpoint")
        assert exc.value.code == "ANSWER_TOO_LARGE"
        assert exc.value.details["limit"] == CHECKPOINT_BYTES
        assert exc.value.details["read"] <= CHECKPOINT_BYTES + ONE_READ
    finally:
        source.close()


@pytest.mark.parametrize("answer", [
    b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\nx",  # a request-smuggling sign
    b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x10\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokX\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",  # then the connection ends
    b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"x" * 200_000 + b"\r\n",  # an endless head
])
def test_broken_answers_are_bad_responses(scripted: Callable[[Handler], Scripted],
                                          answer: bytes) -> None:
    server = scripted(lambda conn, _req: conn.sendall(answer) or False)
    with Client(server.url, timeout=5) as client, pytest.raises(Unreachable) as exc:
        client.get("/")
    assert exc.value.code == "BAD_RESPONSE"


def test_an_answer_cut_inside_its_head_is_a_lost_connection(
        scripted: Callable[[Handler], Scripted]) -> None:
    server = scripted(lambda conn, _req: conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-len")
                      or False)
    with Client(server.url, timeout=5) as client, pytest.raises(Unreachable) as exc:
        client.get("/")
    assert exc.value.code == "CONNECTION_LOST"


def test_no_header_injection() -> None:
    with Client("http://127.0.0.1:9") as client:
        for method, path, headers in (("GET", "/x\r\nevil: 1", None), ("GET\n", "/", None),
                                      ("GET", "/", {"x": "1\r\nevil: 2"})):
            with pytest.raises(AlexandriaError) as exc:
                client.request(method, path, headers=headers)
            assert exc.value.code == "BAD_REQUEST_TARGET"
        assert client.connections == 0  # refused before connecting
