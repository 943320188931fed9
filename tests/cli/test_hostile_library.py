"""A hostile library cannot write into the terminal through the CLI: a rewriting proxy between
the CLI and a real library puts line breaks, escape sequences and C1 controls into the fields a
library answers unsigned (counts, offsets, the library's name, an object's head, its ancestors'
titles), and an author puts them into a signed body.  Every line the CLI prints is its own, no
control character reaches the terminal raw, and ``--json`` carries them as ``\\uXXXX``."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.support.cli import CLI, Library, cli, cli_env

pytestmark = pytest.mark.slow

FORGED = "verified: every signature checks out"
#: a line break then a forged line, a screen clear, and the C1 control sequence introducer
INJECT = f"3\n{FORGED}\x1b[2J\u009b2J\r"
RAW = ("\x1b", "\u009b", "\r", "\x07")


def rewrite(path: str, doc: Any) -> Any:
    """What the hostile library changes in an answer."""
    if not isinstance(doc, dict):
        return doc
    if path.startswith("/api/catalogue"):
        doc.update(library=INJECT, total=INJECT, next_offset=INJECT)
    elif path.startswith("/api/objects/"):
        doc.update(head=INJECT, revisions=INJECT, next_offset=INJECT,
                   ancestors=[{"record": {"title": INJECT}}])
    elif "error" in doc:
        doc.update(error=INJECT, code=INJECT)
    return doc


class Proxy:
    """An HTTP server on 127.0.0.1 that forwards to ``upstream`` and rewrites JSON answers."""

    def __init__(self, upstream: str) -> None:
        client = httpx.Client(base_url=upstream, timeout=30)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("content-type", "authorization", "accept")}
                r = client.request(self.command, self.path, content=body, headers=headers)
                data = r.content
                if r.headers.get("content-type", "").startswith("application/json"):
                    data = json.dumps(rewrite(self.path, r.json()), ensure_ascii=False).encode()
                self.send_response(r.status_code)
                self.send_header("content-type", r.headers.get("content-type", "text/plain"))
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.client = client

    def __enter__(self) -> Proxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        self.client.close()


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Library]:
    library = Library.create(tmp_path_factory.mktemp("hostile"))
    library.participant("owner")
    yield library
    library.stop()


@pytest.fixture(scope="module")
def claim(lib: Library) -> str:
    """A claim whose signed body carries the same controls (an author may write them)."""
    content = {"kind": "claim", "title": "Arithmetic", "body": {
        "statement": f"one plus one\n{FORGED}\x1b[2J\u009b2J", "scope": "integers",
        "assumptions": []}, "links": []}
    r = cli("publish", "-", home=lib.homes["owner"], stdin=json.dumps(content))
    return r.stdout.strip()


@pytest.fixture(scope="module")
def proxy(lib: Library) -> Iterator[Proxy]:
    with Proxy(lib.url) as p:
        yield p


def _printed(*args: str, lib: Library, proxy: Proxy) -> tuple[str, str]:
    r = cli("--library", proxy.url, *args, home=lib.homes["owner"], expect=None)
    for text in (r.stdout, r.stderr):
        assert not any(c in text for c in RAW), (args, text)
        # no line of the output is one the library wrote
        assert not any(line.startswith(FORGED) for line in text.splitlines()), (args, text)
    return r.stdout, r.stderr


@pytest.mark.parametrize("command", [("search",), ("search", "arithmetic"), ("object", "CLAIM"),
                                     ("get", "CLAIM"), ("get", "ab" * 32)])
def test_text_output_is_the_clis_own(lib: Library, proxy: Proxy, claim: str,
                                     command: tuple[str, ...]) -> None:
    args = [claim if a == "CLAIM" else a for a in command]
    out, err = _printed(*args, lib=lib, proxy=proxy)
    assert (out + err).strip()
    if command[0] == "get" and args[1] == claim:
        assert "\\u001b[2J\\u009b2J" in out  # the body's controls, visible


@pytest.mark.parametrize("command", [("search",), ("object", "CLAIM"), ("get", "CLAIM"),
                                     ("get", "ab" * 32)])
def test_json_output_escapes_every_control(lib: Library, proxy: Proxy, claim: str,
                                           command: tuple[str, ...]) -> None:
    args = [claim if a == "CLAIM" else a for a in command]
    out, _err = _printed("--json", *args, lib=lib, proxy=proxy)
    doc = json.loads(out)  # the same JSON value, the controls escaped
    assert "\\u009b" in out and "\\u001b" in out
    if command[0] == "search":
        assert doc["library"] == INJECT
    elif command[0] == "object":
        assert doc["head"] == INJECT
    elif args[1] == claim:
        body = doc["record"]["body"]
        body = json.loads(body) if isinstance(body, str) else body
        assert body["statement"].endswith("\x1b[2J\u009b2J")
    else:
        assert doc["error"] == INJECT


def test_json_to_a_terminal_escapes_every_control(lib: Library, proxy: Proxy) -> None:
    """``--json`` whose stdout is a terminal (a pseudo-terminal here) carries the library's
    controls as ``\\uXXXX`` too."""
    leader, follower = pty.openpty()
    try:
        r = subprocess.run([*CLI, "--library", proxy.url, "--json", "search"], stdout=follower,
                           stderr=subprocess.PIPE, env=cli_env(lib.homes["owner"]), timeout=120,
                           check=True)
        os.close(follower)
        follower = -1
        data = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            data += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    out = data.decode()
    assert not any(c in out.replace("\r\n", "\n") for c in RAW), out
    assert json.loads(out)["library"] == INJECT
    assert not any(line.startswith(FORGED) for line in r.stderr.decode().splitlines())
