"""``alexandria export`` and ``alexandria verify`` as users run them, against a real server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from alexandria.audit import export, verify
from alexandria.core.canonical import canonical
from alexandria.core.timestamps import format_ms, now_ms, parse_ms
from alexandria.errors import AlexandriaError
from alexandria.service.bootstrap import Founding, found_library
from tests.support.library import SEED, T0
from tests.support.liveserver import NewDb, Server, serving, write_library_files

pytestmark = pytest.mark.slow


@dataclass
class Live:
    server: Server
    founding: Founding
    db: Path
    tmp: Path
    ids: list[str]
    early_note: str  # a checkpoint signed after the first three contributions


def alexandria(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "alexandria.cli", *args], input=stdin,
                          capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("cli-log")
    founding = found_library(seed=SEED, created_at=T0)
    owner = founding.enroll("owner")
    genesis, log_key = write_library_files(founding, tmp)
    db = module_db(tmp / "lib.db")
    with serving(genesis, db, log_key) as server, httpx.Client(base_url=server.url) as c:
        for doc in founding.authority_documents():
            assert c.post("/api/authority", json=doc).status_code == 201
        ids, early = [], ""
        for i in range(6):
            content = {"kind": "discussion", "title": f"Topic {i}", "body": {"text": "t"},
                       "links": [], "previous": ""}
            env = owner.envelope(founding.genesis, content, format_ms(now_ms() - 1000))
            r = c.post("/api/entries", json=env)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
            if i == 2:
                early = c.get("/api/log/checkpoint").text
        # a checkpoint of the whole log, so that an export of the database alone is covered
        # whichever of this module's tests runs first
        assert c.get("/api/log/checkpoint").status_code == 200
        yield Live(server, founding, db, tmp, ids, early)


def test_export_from_a_server_and_from_its_database_are_the_same_bytes(live: Live) -> None:
    out = live.tmp / "from-url.jsonl"
    r = alexandria("export", "--url", live.server.url, "--output", str(out))
    assert r.returncode == 0, r.stderr
    r2 = alexandria("export", "--db", str(live.db))
    assert r2.returncode == 0, r2.stderr
    assert out.read_bytes() == r2.stdout
    lines = r2.stdout.splitlines()
    assert orjson.loads(lines[0])["size"] == 8
    assert sum(line.startswith(b'{"checkpoint"') for line in lines) == 2


def test_verify_an_export_file_stdin_and_a_server(live: Live) -> None:
    data = alexandria("export", "--db", str(live.db)).stdout
    path = live.tmp / "export.jsonl"
    path.write_bytes(data)
    pin = live.founding.genesis.pin
    r = alexandria("verify", "--genesis-pin", pin, str(path), "--progress")
    assert r.returncode == 0, r.stderr
    assert b"verified 8 entries (6 contributions, 2 authority certificates" in r.stdout
    assert b"verifying: 100%" in r.stderr  # the progress bar
    r = alexandria("--json", "verify", "--genesis-pin", pin, "-", "--workers", "0", stdin=data)
    assert r.returncode == 0, r.stderr
    summary = orjson.loads(r.stdout)
    assert summary["verified"] is True and summary["size"] == 8 and summary["uncovered"] == 0
    r = alexandria("verify", "--genesis-pin", pin, "--url", live.server.url)
    assert r.returncode == 0, r.stderr


def test_verify_names_the_first_bad_sequence_and_exits_6(live: Live) -> None:
    data = alexandria("export", "--db", str(live.db)).stdout
    lines = data.splitlines(keepends=True)
    del lines[3]  # the entry with sequence 3
    r = alexandria("verify", "--genesis-pin", live.founding.genesis.pin, "-",
                   stdin=b"".join(lines))
    assert r.returncode == 6  # verification failed (docs/cli.md)
    assert b"sequence 3: expected sequence 3, the line says 4 [SEQUENCE_MISMATCH]" in r.stderr
    lines = data.splitlines(keepends=True)
    del lines[5]  # the entry with sequence 5, which the first checkpoint ends at
    r = alexandria("verify", "--genesis-pin", live.founding.genesis.pin, "-",
                   stdin=b"".join(lines))
    assert r.returncode == 6
    assert b"sequence 5: a checkpoint of size 5 stands after leaf 4" in r.stderr
    r = alexandria("--json", "verify", "--genesis-pin", live.founding.genesis.pin, "-",
                   stdin=b"".join(lines))
    err = orjson.loads(r.stdout)
    assert err["code"] == "CHECKPOINT_PLACE" and err["details"]["sequence"] == 5


def test_verify_refuses_an_export_no_checkpoint_covers_to_its_end(live: Live) -> None:
    """Entries dropped from the end, with the checkpoints that covered them, would leave no
    trace: an export whose last leaves no checkpoint covers is refused unless asked for."""
    pin = live.founding.genesis.pin
    lines = alexandria("export", "--db", str(live.db)).stdout.splitlines(keepends=True)
    header = orjson.loads(lines[0])
    entries = [line for line in lines[1:] if not line.startswith(b'{"checkpoint"')]
    stripped = canonical({**header, "size": 6}) + b"\n" + b"".join(entries[:6])
    r = alexandria("--json", "verify", "--genesis-pin", pin, "-", stdin=stripped)
    assert r.returncode == 6
    err = orjson.loads(r.stdout)
    assert err["code"] == "NOT_COVERED"
    details = err["details"]
    assert (details["size"], details["checkpoint_size"], details["uncovered"]) == (6, 0, 6)
    r = alexandria("verify", "--genesis-pin", pin, "-", "--allow-uncovered", stdin=stripped)
    assert r.returncode == 0, r.stderr
    assert b"no checkpoint in the export" in r.stdout
    assert b"warning: the last 6 entries are verified but no checkpoint" in r.stderr


def test_verify_one_entry_against_a_checkpoint(live: Live) -> None:
    pin = live.founding.genesis.pin
    r = alexandria("--json", "verify", "--genesis-pin", pin, "--url", live.server.url,
                   "--entry", live.ids[4])
    assert r.returncode == 0, r.stderr
    got = orjson.loads(r.stdout)
    assert got["verified"] is True and got["sequence"] == 7 and got["checkpoint_size"] == 8
    assert got["log_key"] == live.founding.log_key.public_hex
    early = live.tmp / "early.note"
    early.write_text(live.early_note)
    r = alexandria("verify", "--genesis-pin", pin, "--url", live.server.url, "--entry",
                   live.ids[1], "--checkpoint", str(early))
    assert r.returncode == 0, r.stderr
    assert b"included in the checkpoint of size 5" in r.stdout
    r = alexandria("verify", "--genesis-pin", pin, "--url", live.server.url, "--entry",
                   live.ids[4], "--checkpoint", str(early))
    assert r.returncode == 6 and b"[NOT_YET_COVERED]" in r.stderr


def test_verify_entry_refuses_what_does_not_hold(live: Live) -> None:
    fetch, close = export.http_fetcher(live.server.url)
    try:
        with pytest.raises(AlexandriaError) as info:
            verify.verify_entry(fetch, "00" * 32, live.ids[0])
        assert info.value.code == "GENESIS_PIN_MISMATCH"
        with pytest.raises(AlexandriaError) as info:
            verify.verify_entry(fetch, live.founding.genesis.pin, "ab" * 32)
        assert info.value.code == "UNKNOWN_REVISION"
        # a checkpoint of the right size whose root is not this log's
        from alexandria.core.checkpoint import Checkpoint, parse_checkpoint, sign_checkpoint

        cp = parse_checkpoint(live.early_note)[0]
        forged = sign_checkpoint(Checkpoint(cp.origin, cp.size, bytes(32)),
                                 live.founding.log_key)
        with pytest.raises(AlexandriaError) as info:
            verify.verify_entry(fetch, live.founding.genesis.pin, live.ids[0], forged)
        assert info.value.code == "INCLUSION_FAILED"

        # E3 runs the server's own checks (rules.signed) and names faults with its codes
        def tampered(change: Callable[[dict[str, Any]], None]) -> export.Fetch:
            def tampering(path: str) -> bytes:
                data = fetch(path)
                if not path.startswith("/api/entries/"):
                    return data
                signed = orjson.loads(data)
                change(signed)
                return orjson.dumps(signed)

            return tampering

        def log_authority(s: dict[str, Any]) -> None:
            s["admission"]["authority"] = live.founding.log_certificate

        def after_the_certificates(s: dict[str, Any]) -> None:
            s["admission"]["admitted_at"] = "2040-01-01T00:00:00.000Z"

        def other_title(s: dict[str, Any]) -> None:
            s["record"]["title"] = "changed"

        for change, code in ((log_authority, "AUTHORITY_UNKNOWN"),
                             (after_the_certificates, "AUTHORITY_EXPIRED"),
                             (other_title, "REVISION_MISMATCH")):
            with pytest.raises(verify.EntryRefused) as refused:
                verify.verify_entry(tampered(change), live.founding.genesis.pin, live.ids[0])
            assert (refused.value.code, refused.value.step) == (code, "E3"), refused.value
            assert refused.value.sequence == 3
    finally:
        close()


def test_usage_errors(live: Live) -> None:
    pin = live.founding.genesis.pin
    for args in (
        ("verify", "--genesis-pin", "xyz", "f"),
        ("verify", "--genesis-pin", pin),
        ("verify", "--genesis-pin", pin, "f", "--url", live.server.url),
        ("verify", "--genesis-pin", pin, "f", "--entry", live.ids[0]),
    ):
        r = alexandria(*args)
        assert r.returncode == 2 and b"[USAGE]" in r.stderr, args


def _one_ms_later(admitted_at: str) -> str:
    ms = parse_ms(admitted_at)
    assert ms is not None
    return format_ms(ms + 1)


def test_verify_entry_refuses_an_admission_time_that_is_not_the_logged_one(live: Live) -> None:
    """The entry's leaf is recomputed from its signed record alone (``record``, ``signature``,
    ``admission.admitted_at``): a server that states another admission time than it logged —
    for the entry, for its authority certificate, or for the checkpoint's last leaf whose time
    decides the log key's validity — fails an inclusion proof."""
    fetch, close = export.http_fetcher(live.server.url)
    pin = live.founding.genesis.pin
    revision = live.ids[2]
    assert verify.verify_entry(fetch, pin, revision).sequence == 5

    def lying(path: str) -> bytes:
        body = fetch(path)
        value = orjson.loads(body)
        if path == f"/api/entries/{revision}":
            admission = value["admission"]
            admission["admitted_at"] = _one_ms_later(admission["admitted_at"])
        elif path == "/api/authority":
            item = value["items"][0]  # the native application's certificate
            item["admitted_at"] = _one_ms_later(item["admitted_at"])
        elif path.startswith("/api/log/entries"):
            leaf = value["entries"][0]["leaf"]
            leaf["admitted_at"] = _one_ms_later(leaf["admitted_at"])
        else:
            return body
        return orjson.dumps(value)

    try:
        for lie in ("/api/entries/", "/api/authority", "/api/log/entries"):
            def one_lie(path: str, lie: str = lie) -> bytes:
                return lying(path) if path.startswith(lie) else fetch(path)

            with pytest.raises(AlexandriaError) as info:
                verify.verify_entry(one_lie, pin, revision)
            assert info.value.code == "INCLUSION_FAILED", (lie, info.value.message)
    finally:
        close()
