"""Operator commands: ``genesis init`` with a threshold of root keys, ``authority issue`` /
``enroll`` / ``approve`` / ``revoke``, and ``alexandria demo`` serving the worked example.
The operator flow runs on both backends (``new_db``); ``demo`` and the flow in the default
directory test the embedded default, a SQLite library in ``./alexandria-data/`` (no ``--db``)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from alexandria.cli.demo import fresh_directory
from alexandria.core.trust import Genesis
from tests.support.cli import CLI, cli, cli_json
from tests.support.library import CONTRACT
from tests.support.liveserver import NewDb, Server, free_port, stop_group

pytestmark = pytest.mark.slow


def test_genesis_with_two_of_three_roots(tmp_path: Path, new_db: NewDb) -> None:
    op = tmp_path / "op"
    out = cli_json("genesis", "init", "--dir", str(op), "--library", "two-of-three",
                   "--origin", "library.example.org/log", "--roots", "3", "--threshold", "2")
    genesis = Genesis.from_document(json.loads((op / "genesis.json").read_text()))
    assert genesis.pin == out["pin"] == (op / "genesis.pin").read_text().strip()
    assert genesis.threshold == 2 and len(genesis.root_keys) == 3
    for i in (1, 2, 3):
        assert stat.S_IMODE((op / f"root-{i}.key").stat().st_mode) == 0o600
    r = cli("genesis", "init", "--dir", str(op), "--library", "again", "--origin", "a.org/log",
            expect=1)
    assert "GENESIS_EXISTS" in r.stderr
    r = cli("genesis", "init", "--dir", str(tmp_path / "bad"), "--library", "x",
            "--origin", "https://not-schema-less", expect=1)
    assert r.stderr.count("\n") == 1

    server = Server(op / "genesis.json", new_db(tmp_path / "lib.db"))
    try:
        r = cli("authority", "issue", "--dir", str(op), "--library", server.url,
                "--root-key", str(op / "root-2.key"), expect=1)
        assert "ROOT_KEYS_MISSING" in r.stderr  # one key of a 2-of-3 genesis is not enough
        r = cli("authority", "issue", "--dir", str(op), "--library", server.url,
                "--root-key", str(op / "root-2.key"), "--root-key", str(op / "root-2.key"),
                expect=1)
        assert "ROOT_KEYS_MISSING" in r.stderr  # nor is the same key named twice
        admitted = cli_json("authority", "issue", "--dir", str(op), "--library", server.url,
                            "--root-key", str(op / "root-1.key"), "--root-key",
                            str(op / "root-3.key"), "--days", "10")
        assert admitted["sequence"] == 1
        assert len(admitted["document"]["signatures"]) == 2
        key = admitted["document"]["certificate"]["key"]
        assert stat.S_IMODE((op / "authority.key").stat().st_mode) == 0o600
        items = httpx.get(f"{server.url}/api/authority").json()["items"]
        assert json.dumps(items).count(key) >= 1

        actor = cli("authority", "enroll", "alice", "--dir", str(op)).stdout.strip()
        assert len(actor) == 64
        assert "ALREADY_ENROLLED" in cli("authority", "enroll", "alice", "--dir", str(op),
                                         expect=1).stderr
        home = tmp_path / "alice"
        worker = cli("worker", "init", "--library", server.url, "--genesis", genesis.pin,
                     home=home).stdout.strip()
        cert_file = tmp_path / "alice.cert.json"
        cli("authority", "approve", "--dir", str(op), "--actor", "alice", "--worker", worker,
            "--scopes", "publish,comment", "--days", "7", "--out", str(cert_file))
        cert = json.loads(cert_file.read_text())["certificate"]
        assert cert["actor"] == actor and cert["scopes"] == ["library.comment",
                                                            "library.publish"]
        imported = cli_json("worker", "import", str(cert_file), home=home)
        assert imported["actor"] == actor
        r = cli("authority", "approve", "--dir", str(op), "--actor", "bob", "--worker", worker,
                "--scopes", "all", expect=1)
        assert "UNKNOWN_ACTOR" in r.stderr
        r = cli("authority", "approve", "--dir", str(op), "--actor", "alice", "--worker",
                worker, "--scopes", "publish,fly", expect=1)
        assert "BAD_SCOPE" in r.stderr

        # root keys revoke the authority key: its worker certificates stop working
        revoked = cli_json("authority", "revoke", key, "--dir", str(op), "--library", server.url)
        assert revoked["sequence"] == 2
        r = cli("--json", "publish", "-", home=home, expect=3, stdin=json.dumps(
            {"kind": "discussion", "title": "After", "body": {"text": "revoked"}}))
        assert json.loads(r.stdout)["code"] and "rejected" in r.stderr
    finally:
        server.stop()


def test_demo_serves_the_worked_example(tmp_path: Path) -> None:
    port = free_port()
    demo = tmp_path / "demo"
    proc = subprocess.Popen([*CLI, "demo", "--dir", str(demo), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, start_new_session=True)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Ctrl-C stops the server"):
                break
        text = "".join(lines)
        assert f"http://127.0.0.1:{port}" in text, text
        pin = (demo / "operator" / "genesis.pin").read_text().strip()
        assert pin in text and "alexandria search" in text
        owner = tmp_path / "demo-homes" / "owner"  # beside the demo: the next one keeps it
        steps = CONTRACT["object_examples"]["steps"]
        names = dict(line.split() for line in (demo / "names").read_text().splitlines())
        assert list(names) == [s["name"] for s in steps]
        head = cli_json("get", "claim", "--head", home=owner)
        assert head["id"] == names["merge"]
        assert cli_json("whoami", home=tmp_path / "demo-homes" / "peer")["genesis"] == pin
        assert not (demo / "owner").exists()
        found = cli_json("search", "arithmetic", home=owner)
        assert names["space"] in [i["id"] for i in found["items"]]
        r = cli("changes", "--root", "space", home=owner)
        assert names["subspace"] in r.stdout
        again = subprocess.run([*CLI, "demo", "--dir", str(demo), "--port", str(port)],
                               capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert again.returncode == 1 and "PORT_IN_USE" in again.stderr
    finally:
        stop_group(proc)
        if proc.stderr:
            proc.stderr.close()
    with pytest.raises(httpx.TransportError):  # the demo's server stopped with it
        httpx.get(f"http://127.0.0.1:{port}/api/genesis", timeout=2)
    # what a stopped demo leaves (its database's lock file too) the next one replaces
    left = tmp_path / "left"
    shutil.copytree(demo, left)
    fresh_directory(left)
    assert [p.name for p in left.iterdir()] == [".alexandria-demo"]
    # a directory holding the demo's marker and anything else is not the demo's to delete
    (demo / "thesis.tex").write_text("three years of work\n")
    r = cli("demo", "--dir", str(demo), "--port", str(free_port()), expect=1)
    assert "DIR_NOT_EMPTY" in r.stderr and (demo / "thesis.tex").exists()
    planted = tmp_path / "home"
    planted.mkdir()
    (planted / "notes").write_text("mine\n")
    (planted / ".alexandria-demo").write_bytes((demo / ".alexandria-demo").read_bytes())
    r = cli("demo", "--dir", str(planted), "--port", str(free_port()), expect=1)
    assert "DIR_NOT_EMPTY" in r.stderr and (planted / "notes").exists()


def test_operator_flow_in_the_default_directory(tmp_path: Path) -> None:
    """``genesis init`` and ``authority issue`` default to ./alexandria-data/, the directory
    ``alexandria serve`` uses with no arguments: the server runs before the log key exists and
    signs checkpoints once it is certified and the server restarted."""
    pin = cli("genesis", "init", "--library", "flow", "--origin", "flow.example/log",
              cwd=tmp_path).stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def serve() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([*CLI, "serve", "--port", str(port)], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/api/genesis", timeout=2)
                return proc
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("server did not start")

    proc = serve()
    try:
        assert httpx.get(f"{url}/api/genesis").json()["pin"] == pin
        cli("authority", "issue", "--library", url, cwd=tmp_path)
        cli("authority", "issue", "--roles", "log", "--library", url, cwd=tmp_path)
        assert httpx.get(f"{url}/api/log/checkpoint").status_code != 200
    finally:
        stop_group(proc)
    proc = serve()
    try:
        note = httpx.get(f"{url}/api/log/checkpoint")
        assert note.status_code == 200 and note.text.startswith("flow.example/log\n2\n")
    finally:
        stop_group(proc)
