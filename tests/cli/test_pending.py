"""Pending files under failure: the server down, the connection lost after the server admitted,
a 5xx; and ``changes`` resyncing when the library cannot honour a saved cursor."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from alexandria.cli.config import Home
from alexandria.cli.pending import Outbox, Outcome, Pending
from alexandria.core.canonical import canonical
from alexandria.errors import Refused
from tests.support.cli import Library, cli, cli_json
from tests.support.liveserver import NewDb
from tests.support.loopback import accept_forever, content_length

pytestmark = pytest.mark.slow

SPACE = {"kind": "space", "title": "Offline", "body": {"summary": "Written while away."}}


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    base = tmp_path_factory.mktemp("pending")
    library = Library.create(base, module_db(base / "library.db"))
    library.participant("owner")
    yield library
    library.stop()


def _pending(home: Path) -> list[Path]:
    return sorted(p for p in (home / "pending").glob("*.json") if not p.name.endswith(".meta.json"))


def _sent_bytes(signed: dict[str, object]) -> bytes:
    return canonical({"record": signed["record"], "signature": signed["signature"]})


def test_publish_while_the_server_is_down_then_retry(lib: Library) -> None:
    home = lib.homes["owner"]
    lib.stop()
    try:
        r = cli("--json", "publish", "-", "--name", "offline", home=home,
                stdin=json.dumps(SPACE), expect=5)
        error = json.loads(r.stdout)
        assert error["code"] == "CONNECTION_FAILED"
        assert "alexandria retry" in r.stderr and r.stderr.startswith("alexandria: error:")
        [pending] = _pending(home)
        rev = pending.name.removesuffix(".json")
        assert error["details"]["pending"] == rev
        kept = pending.read_bytes()
        listing = cli("pending", home=home)
        assert listing.stdout.startswith(rev) and "Offline" in listing.stdout
        r = cli("--json", "retry", home=home, expect=5)  # still down: kept, unchanged
        assert json.loads(r.stdout)["results"][0]["status"] == "kept"
        assert pending.read_bytes() == kept
    finally:
        lib.start()
    r = cli("retry", home=home)
    assert r.stdout.split() == [rev, "admitted"]
    assert _pending(home) == []
    signed = json.loads((home / "published" / f"{rev}.json").read_text())
    assert signed["id"] == rev
    assert _sent_bytes(signed) == kept  # the very bytes signed before the server went down
    assert httpx.get(f"{lib.url}/api/entries/{rev}").json() == signed
    assert (home / "names").read_text().split() == ["offline", rev]
    assert cli_json("retry", home=home) == {"results": []}
    assert "nothing pending" in cli("pending", home=home).stderr


class DroppingProxy:
    """A loopback TCP proxy in front of the server.  Mode ``drop``: forward the request, wait
    for the server's whole answer, then close the client's connection without relaying it.
    Mode ``hang``: the same, but keep the client waiting until it gives up.  Mode ``503``:
    answer 503 without forwarding.  Mode ``pass``: relay both ways."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.mode = "pass"
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        accept_forever(self.listener, self._handle)

    def close(self) -> None:
        self.listener.close()

    @staticmethod
    def _message(sock: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = content_length(head)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            if self.mode == "503":
                self._message(conn)
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                             b"connection: close\r\n\r\n")
                return
            with socket.create_connection(self.upstream) as up:
                if self.mode in ("drop", "hang"):
                    up.sendall(self._message(conn))
                    self._message(up)  # the server has answered: it acted on the request
                    self.dropped += 1
                    if self.mode == "hang":
                        conn.recv(1)  # returns when the client closes its end
                    return
                threading.Thread(target=self._pipe, args=(up, conn), daemon=True).start()
                self._pipe(conn, up)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def test_answer_lost_after_admission_then_retry_is_idempotent(lib: Library,
                                                               tmp_path: Path) -> None:
    """A timeout and a dropped connection, each after the server admitted; a 503 on retry;
    then retries that get 200 with the stored record: nothing is admitted twice."""
    proxy = DroppingProxy(lib.port)
    home = tmp_path / "proxied"
    try:
        home.mkdir()
        for name in ("worker.key", "certificate.json", "genesis.json"):
            (home / name).write_bytes((lib.homes["owner"] / name).read_bytes())
        (home / "worker.key").chmod(0o600)
        (home / "library.json").write_text(json.dumps({"url": proxy.url, "genesis": lib.pin}))
        proxy.mode = "hang"
        r = cli("--json", "publish", "-", home=home, stdin=json.dumps(SPACE | {"title": "Slow"}),
                env={"ALEXANDRIA_TIMEOUT": "1"}, expect=5)
        assert json.loads(r.stdout)["code"] == "TIMEOUT"
        proxy.mode = "drop"
        r = cli("--json", "publish", "-", home=home, stdin=json.dumps(SPACE | {"title": "Lost"}),
                expect=5)
        assert json.loads(r.stdout)["code"] == "CONNECTION_LOST" and proxy.dropped == 2
        pending = _pending(home)
        assert len(pending) == 2
        revs = [json.loads(cli("--json", "pending", home=home).stdout)["pending"][i]["id"]
                for i in (0, 1)]
        assert {f"{rev}.json" for rev in revs} == {p.name for p in pending}
        stored = [httpx.get(f"{lib.url}/api/entries/{rev}") for rev in revs]
        assert [s.status_code for s in stored] == [200, 200]  # admitted; the client never heard
        assert [s.json()["record"]["title"] for s in stored] == ["Slow", "Lost"]
        proxy.mode = "503"
        r = cli("--json", "retry", home=home, expect=5)
        results = json.loads(r.stdout)["results"]
        assert results[0]["status"] == "kept" and results[0]["error"]["code"] == "SERVER_ERROR"
        assert results[1] == {"id": revs[1], "status": "kept"}  # not tried after the failure
        assert _pending(home) == pending
        proxy.mode = "pass"
        r = cli("--json", "retry", home=home)
        assert json.loads(r.stdout)["results"] == [
            {"id": rev, "status": "admitted", "created": False} for rev in revs]  # 200s
        for rev, s in zip(revs, stored, strict=True):
            assert (home / "published" / f"{rev}.json").read_bytes() == s.content
        follow_up = cli_json("publish", "-", home=home, stdin=json.dumps(SPACE | {"title": "Next"}))
        assert follow_up["admission"]["sequence"] == stored[1].json()["admission"]["sequence"] + 1
    finally:
        proxy.close()


def test_changes_resync_when_the_library_cannot_honour_the_cursor(lib: Library) -> None:
    home = lib.homes["owner"]
    space = cli("publish", "-", home=home, stdin=json.dumps(SPACE | {"title": "Feed"})).stdout
    root = space.strip()
    cli("changes", "--root", root, home=home)  # saves a cursor at the current log size
    backup = lib.base / "backup.db"
    cli("backup", "--db", str(lib.db), str(backup))
    doc = {"kind": "document", "title": "Later", "body": {"text": "after the backup"},
           "links": [{"relation": "contained_in", "target": root}]}
    later = cli("publish", "-", home=home, stdin=json.dumps(doc)).stdout.strip()
    r = cli("--json", "changes", "--root", root, home=home)
    assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == [later]
    lib.stop()  # restore the older backup: the saved cursor is now beyond its log
    restored = cli("restore", str(backup), "--db", str(lib.db), "--replace", expect=None)
    # restored either way; when a checkpoint past the backup was signed meanwhile, the library
    # says it is behind it (exit 1) and serves reads only until caught up (docs/operations.md)
    assert restored.returncode == 0 or (
        restored.returncode == 1 and "CATCH_UP_REQUIRED" in restored.stderr), restored.stderr
    lib.start()
    r = cli("--json", "changes", "--root", root, home=home)
    assert "starting again from the beginning" in r.stderr
    assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == [root]
    r = cli("changes", "--root", root, home=home)
    assert r.stdout == ""


def _envelope(title: str) -> bytes:
    record = {"kind": "space", "title": title, "body": "{}", "links": [], "previous": ""}
    return json.dumps({"record": record, "signature": {}}).encode()


#: ids whose order is not the order they are written in
IDS = ("f" * 64, "0" * 64, "a" * 64)


def _chunk_of_three(tmp_path: Path) -> tuple[Home, list[Pending]]:
    home = Home(tmp_path / "home")
    written = Outbox(home).write_many([
        (IDS[0], _envelope("first"), {"kind": "space", "title": "first"}),
        (IDS[1], _envelope("second"), {"kind": "space", "title": "second", "name": "two"}),
        (IDS[2], _envelope("third"), {"kind": "space", "title": "third"}),
    ])
    return home, written


def test_a_chunk_is_one_file_and_what_it_leaves_behind_is_pending_in_its_order(
    tmp_path: Path,
) -> None:
    """``write_many`` makes a chunk durable in one file; a chunk file left behind (a crash
    before its answers were recorded) becomes files of their own for the next outbox —
    in the chunk's order, each envelope byte for byte, its name kept, and what the home has
    published meanwhile left out."""
    home, written = _chunk_of_three(tmp_path)
    [chunk] = os.listdir(home.pending_dir)
    assert chunk == f"chunk-{IDS[0]}.jsonl" and all(p.chunk == chunk for p in written)
    assert (home.pending_dir / chunk).stat().st_mode & 0o777 == 0o600
    home.published_dir.mkdir(parents=True)
    (home.published_dir / f"{IDS[2]}.json").write_bytes(b"{}")  # admitted before the crash
    again = Outbox(home)
    assert [p.id for p in again.pending()] == [IDS[0], IDS[1]]
    assert [p.envelope for p in again.pending()] == [written[0].envelope, written[1].envelope]
    assert again.load(IDS[1]).meta["name"] == "two"
    assert sorted(os.listdir(home.pending_dir)) == sorted(
        [f"{IDS[0]}.json", f"{IDS[1]}.json", f"{IDS[1]}.meta.json"])


def test_a_settled_chunk_keeps_only_what_is_still_pending(tmp_path: Path) -> None:
    """Once every line of a chunk is answered: the admitted one published, the rejected one
    in rejected/, the kept one pending in a file of its own, and the chunk file gone."""
    home, written = _chunk_of_three(tmp_path)
    outbox = Outbox(home)
    first, second, third = written
    signed = {"id": first.id, "record": first.record}
    outbox._reject(second, Refused("no", "LINK_TARGET_MISSING"), 422)
    outbox.settle([(first, b"signed", signed)], [
        Outcome(first, "admitted"), Outcome(second, "rejected"), Outcome(third, "kept")])
    assert (home.published_dir / f"{first.id}.json").read_bytes() == b"signed"
    assert (home.rejected_dir / f"{second.id}.json").read_bytes() == second.envelope
    assert os.listdir(home.pending_dir) == [f"{third.id}.json"]
    assert [p.envelope for p in outbox.pending()] == [third.envelope]


def test_a_chunk_file_that_is_not_ours_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file named like a chunk that does not parse stops no command: it is left as it is,
    said once on stderr, and the rest of pending/ is read."""
    home, _written = _chunk_of_three(tmp_path)
    odd = [home.pending_dir / f"chunk-{n}.jsonl" for n in ("a", "b", "c")]
    odd[0].write_bytes(b"not\ta chunk\n")
    odd[1].write_bytes(f"{IDS[0]}\t[1]\t{{}}\n".encode())  # its meta not an object
    odd[2].write_bytes(b"\xff\t{}\t{}\n")
    outbox = Outbox(home)  # the chunk left behind becomes files; the odd ones stay
    assert [p.id for p in outbox.pending()] == list(IDS)
    assert all(f.exists() for f in odd)
    assert capsys.readouterr().err.count("is not a chunk of pending envelopes") == 3


def test_a_temporary_file_a_killed_command_left_goes_a_day_later(tmp_path: Path) -> None:
    """A command killed while writing leaves its temporary file in pending/; the next
    outbox removes it once it is a day old, and leaves a fresh one (perhaps still being
    written) and every other file alone."""
    home, _written = _chunk_of_three(tmp_path)
    folder = home.pending_dir
    old, fresh = f".chunk-{IDS[1]}.jsonl.0123456789ab.tmp", f".{IDS[2]}.json.ba9876543210.tmp"
    not_ours = [".notes.tmp", ".x.0123456789ab.tmp.bak", "chunk-x.jsonl.0123456789ab.tmp"]
    for name in (old, fresh, *not_ours):
        (folder / name).write_bytes(b"half an envelope")
    day_and_a_minute = 24 * 3600 + 60
    for name in (old, *not_ours):
        os.utime(folder / name, (os.path.getmtime(folder / name) - day_and_a_minute,) * 2)
    outbox = Outbox(home)
    assert not (folder / old).exists()
    assert (folder / fresh).exists() and all((folder / n).exists() for n in not_ours)
    assert [p.id for p in outbox.pending()] == list(IDS)
