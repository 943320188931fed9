"""Approval like ``gh auth login``: ``alexandria login`` asks, ``alexandria authority approve
CODE`` approves, ``login`` receives the certificate.  A live library on 127.0.0.1; every step
through the real command line, the bounds through raw HTTP."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest

from alexandria.core.keys import SigningKey
from alexandria.core.trust import make_worker_certificate
from alexandria.service.enrolment import signed_bytes
from alexandria.service.operator_dir import OperatorDir, window
from alexandria.store.backends import open_readonly
from tests.support.cli import CLI, ROOT, Library, cli, cli_env, cli_json, module_library
from tests.support.liveserver import NewDb

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    yield from module_library(tmp_path_factory, "login", module_db)


def _log_size(lib: Library) -> int:
    with open_readonly(lib.db) as conn:
        (count,) = conn.execute("SELECT count(*) FROM log").fetchone()
    return int(count)


def _request(lib: Library, key: SigningKey, name: str = "mallory",
             scopes: tuple[str, ...] = ("library.comment",)) -> httpx.Response:
    body = {"worker": key.public_hex, "name": name, "scopes": list(scopes),
            "proof": key.sign(signed_bytes(lib.pin, key.public_hex, name, list(scopes)))}
    return httpx.post(f"{lib.url}/api/enrolments", content=orjson.dumps(body))


def test_login_then_approve_by_code(lib: Library, tmp_path: Path) -> None:
    home = tmp_path / "alice"
    op = str(lib.operator)
    before = _log_size(lib)
    r = cli("login", lib.url, "--name", "alice", "--genesis", lib.pin, "--no-wait", home=home)
    code = r.stdout.strip()
    assert re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}", code), r.stdout
    assert f"alexandria authority approve {code}" in r.stderr
    listing = cli_json("authority", "requests", "--dir", op, "--library", lib.url)["requests"]
    [mine] = [x for x in listing if x["code"] == code]
    assert mine["name"] == "alice" and mine["worker"] == cli_json("whoami", home=home)["worker"]
    assert mine["scopes"] == ["library.comment", "library.publish", "library.vote"]
    assert code in cli("authority", "requests", "--dir", op, "--library", lib.url).stdout

    waiting = subprocess.Popen(
        [*CLI, "login"], env=cli_env(home, {"ALEXANDRIA_POLL_SECONDS": "0.2"}), cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    approved = cli("authority", "approve", code.lower(), "--dir", op, "--library", lib.url)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    actor = approved.stdout.strip()
    assert out.strip() == actor and "logged in" in err
    assert json.loads((lib.operator / "actors.json").read_text())["alice"] == actor
    who = cli_json("whoami", home=home)["certificate"]
    assert who["actor"] == actor and who["valid_now"] is True
    space = {"kind": "space", "title": "Alice's", "body": {"summary": "after login"}}
    r = cli("publish", "-", home=home, stdin=json.dumps(space), expect=3)
    assert "SCOPE" in r.stderr  # asked for publish, comment, vote: curate was not granted
    assert not (home / "enrolment.json").exists()
    assert "already logged in" in cli("login", home=home).stderr
    assert _log_size(lib) == before  # requests and approvals never touch the log

    # a code approves once; a poll with another key sees nothing
    r = cli("authority", "approve", code, "--dir", op, "--library", lib.url, expect=1)
    assert "CODE_USED" in r.stderr  # found by its code, already approved
    cert = (home / "certificate.json").read_bytes()
    again = httpx.post(f"{lib.url}/api/enrolments/{code}/certificate", content=cert)
    assert again.status_code == 409 and again.json()["code"] == "CODE_USED"
    other = httpx.get(f"{lib.url}/api/enrolments/{code}", params={"worker": "ab" * 32})
    assert other.status_code == 404


def test_a_certificate_must_be_for_the_requesting_key(lib: Library) -> None:
    key, stranger = SigningKey.generate(), SigningKey.generate()
    code = _request(lib, key).json()["code"]
    op = OperatorDir(lib.operator)
    genesis = op.genesis()
    not_before, not_after = window(1)
    wrong = make_worker_certificate(genesis, "cd" * 32, stranger.public_hex,
                                    ["library.comment"], SigningKey.load(op.root / "authority.key"),
                                    not_before, not_after)
    r = httpx.post(f"{lib.url}/api/enrolments/{code}/certificate", content=orjson.dumps(wrong))
    assert r.status_code == 403 and r.json()["code"] == "CERTIFICATE_KEY_MISMATCH"
    forged = make_worker_certificate(genesis, "cd" * 32, key.public_hex, ["library.comment"],
                                     SigningKey.generate(), not_before, not_after)
    r = httpx.post(f"{lib.url}/api/enrolments/{code}/certificate", content=orjson.dumps(forged))
    assert r.status_code == 403 and r.json()["code"] == "AUTHORITY_UNKNOWN"
    poll = httpx.get(f"{lib.url}/api/enrolments/{code}", params={"worker": key.public_hex})
    assert poll.json()["status"] == "pending"


def test_enrolment_requests_are_small_signed_and_rate_limited(lib: Library) -> None:
    key = SigningKey.generate()
    body = {"worker": key.public_hex, "name": "eve", "scopes": ["library.comment"],
            "proof": SigningKey.generate().sign(b"something else")}
    r = httpx.post(f"{lib.url}/api/enrolments", content=orjson.dumps(body))
    assert r.status_code == 400 and r.json()["code"] == "PROOF_INVALID"
    r = httpx.post(f"{lib.url}/api/enrolments", content=b"{" + b" " * 4000 + b"}")
    assert r.status_code == 413
    r = httpx.post(f"{lib.url}/api/enrolments", content=orjson.dumps({**body, "extra": 1}))
    assert r.status_code == 400 and r.json()["code"] == "ENROLMENT_SHAPE"
    statuses = [_request(lib, SigningKey.generate()).status_code for _ in range(12)]
    assert statuses[-1] == 429 and statuses.count(201) <= 10
    limited = _request(lib, SigningKey.generate()).json()
    assert limited["code"] == "RATE_LIMITED" and limited["details"]["retry_after"] > 0


def test_login_refuses_a_library_that_is_not_the_pinned_one(lib: Library,
                                                           tmp_path: Path) -> None:
    r = cli("login", lib.url, "--genesis", "0" * 64, "--no-wait", home=tmp_path / "x",
            expect=1)
    assert "GENESIS_PIN_MISMATCH" in r.stderr and not (tmp_path / "x" / "worker.key").exists()


class _Busy(http.server.BaseHTTPRequestHandler):
    """A library taking many requests: 429 ENROLMENTS_BUSY (retry in 1 s) twice, then a code;
    or, for another path, the address's own limit (retry in 590 s)."""

    answers: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.answers.append(1)
        if self.path == "/limited/api/enrolments":
            status, body = 429, {"error": "too many", "code": "RATE_LIMITED",
                                 "details": {"retry_after": 590}}
        elif len(self.answers) <= 2:
            status, body = 429, {"error": "busy", "code": "ENROLMENTS_BUSY",
                                 "details": {"retry_after": 1}}
        else:
            status, body = 201, {"code": "K7QF-2XMB", "expires_at": "2026-01-01T00:15:00.000Z"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_login_asks_again_when_the_library_says_in_a_moment() -> None:
    from alexandria.cli.login import _post_patiently
    from alexandria.client import Client, Unreachable

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with Client(url) as client:
            assert _post_patiently(client, b"{}")["code"] == "K7QF-2XMB"
        assert len(_Busy.answers) == 3
        with Client(f"{url}/limited") as client, pytest.raises(Unreachable) as caught:
            _post_patiently(client, b"{}")  # ten minutes is the user's to wait, not login's
        assert caught.value.details == {"status": 429, "retry_after": 590}
        assert len(_Busy.answers) == 4
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
