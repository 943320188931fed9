"""The warm start of ``alexandria publish`` (``cli/warm.py``), as a user meets it: subprocesses
of the real command line against a live library on 127.0.0.1, each test with its own private
runtime directory (``XDG_RUNTIME_DIR``) and so its own warm process."""

from __future__ import annotations

import json
import marshal
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alexandria.cli import warm
from tests.cli_support import CLI, ROOT, Library, cli, cli_env, write_content
from tests.liveserver import NewDb

pytestmark = pytest.mark.slow

SPACE = {"kind": "space", "title": "Warm", "body": {"summary": "for the warm start tests"}}


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, module_db: NewDb) -> Iterator[Library]:
    base = tmp_path_factory.mktemp("lib")
    library = Library.create(base, module_db(base / "library.db"))
    home = library.participant("owner")
    cli("publish", str(write_content(library.base / "space.json", SPACE)), "--name", "space",
        home=home, env={"ALEXANDRIA_WARM": "0"})
    yield library
    library.stop()


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A private runtime directory (short: a Unix socket's path is at most 107 bytes); the warm
    process started in it is stopped afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="aw-", dir="/tmp"))
    try:
        yield directory
    finally:
        for pid in _warm_pids(directory):
            os.kill(pid, signal.SIGTERM)
        shutil.rmtree(directory, ignore_errors=True)


def _warm_pids(runtime: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(str(runtime).encode() in part for part in cmdline) \
                    and any(b"warm import serve" in part for part in cmdline):
                found.append(int(entry.name))
    return found


def _foreground_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(runtime: Path, **extra: str) -> dict[str, str]:
    return {"XDG_RUNTIME_DIR": str(runtime), "ALEXANDRIA_WARM_IDLE": "60", **extra}


def _socket(runtime: Path, timeout: float = 30) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list((runtime / "alexandria").glob("warm-*.sock"))
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("no warm process started")


def _reply(i: int | str) -> dict[str, Any]:
    """A discussion in the space (named ``_reply`` for what the bench publishes)."""
    return {"kind": "discussion", "title": f"Warm {i}", "body": {"text": f"thread {i}"},
            "links": [{"relation": "contained_in", "target": "$space"}]}


def test_the_second_publish_is_run_by_the_warm_process(lib: Library, runtime: Path,
                                                        tmp_path: Path) -> None:
    home = lib.homes["owner"]
    env = _env(runtime)
    first = cli("-v", "publish", str(write_content(tmp_path / "1.json", _reply(1))), home=home,
                env=env)
    assert "run by the warm process" not in first.stderr  # none yet: it starts one
    sock = _socket(runtime)
    assert (sock.parent.stat().st_mode & 0o777, sock.stat().st_mode & 0o777) == (0o700, 0o600)
    second = cli("-v", "publish", str(write_content(tmp_path / "2.json", _reply(2))),
                 "--name", "two", home=home, env=env)
    assert "run by the warm process" in second.stderr
    rev = second.stdout.strip()
    assert (home / "published" / f"{rev}.json").exists()
    assert not list((home / "pending").glob("*.json"))
    assert f"two {rev}" in (home / "names").read_text()  # the caller's home, via its env
    # standard input, --json, the working directory and relative paths are the caller's
    r = cli("--json", "publish", "-", home=home, env=env, stdin=json.dumps(_reply(3)))
    assert json.loads(r.stdout)["record"]["title"] == "Warm 3"
    write_content(tmp_path / "rel" / "4.json", _reply(4))
    r = cli("-v", "publish", "4.json", home=home, env=env, cwd=tmp_path / "rel")
    assert "run by the warm process" in r.stderr and len(r.stdout.split()) == 1
    # exit statuses and errors come back as a cold start gives them
    r = cli("publish", "-", home=home, env=env,
            stdin=json.dumps(_reply(5) | {"kind": "Discussion"}), expect=3)
    assert "did you mean 'discussion'?" in r.stderr
    r = cli("publish", "missing.json", home=home, env=env, expect=1)
    assert "cannot read missing.json" in r.stderr
    r = cli("publish", "--nmae", "x", "a.json", home=home, env=env, expect=2)
    assert "did you mean: --name?" in r.stderr
    assert "usage:" in cli("publish", "--help", home=home, env=env).stdout


def test_warm_off_and_a_directory_others_can_enter_start_cold(lib: Library, runtime: Path,
                                                             tmp_path: Path) -> None:
    home = lib.homes["owner"]
    path = write_content(tmp_path / "c.json", _reply("cold"))
    r = cli("-v", "publish", str(path), home=home, env=_env(runtime, ALEXANDRIA_WARM="0"))
    assert "run by the warm process" not in r.stderr
    time.sleep(0.5)
    assert not (runtime / "alexandria").exists()
    (runtime / "alexandria").mkdir(mode=0o755)  # someone else could reach a socket in it
    (runtime / "alexandria").chmod(0o755)
    cli("publish", "-", home=home, env=_env(runtime), stdin=json.dumps(_reply("open")))
    time.sleep(1)
    assert not list((runtime / "alexandria").iterdir())


def test_a_request_of_another_install_is_refused_and_the_warm_process_leaves(
        lib: Library, runtime: Path, tmp_path: Path) -> None:
    home = lib.homes["owner"]
    cli("publish", "-", home=home, env=_env(runtime), stdin=json.dumps(_reply("start")))
    sock = _socket(runtime)
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(sock))
        request = marshal.dumps(("another python\0elsewhere\00.0", ["publish", "x.json"], "/",
                                 {}))
        socket.send_fds(client, [len(request).to_bytes(8, "big")], [0, 1, 2])
        client.sendall(request)
        assert client.recv(4) == warm.REFUSED.to_bytes(4, "big")
    deadline = time.monotonic() + 10
    while sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sock.exists()  # gone; the next command starts cold and starts a new one
    r = cli("-v", "publish", "-", home=home, env=_env(runtime), stdin=json.dumps(_reply("next")))
    assert "run by the warm process" not in r.stderr and len(r.stdout.split()) == 1
    _socket(runtime)


def test_the_warm_process_leaves_when_idle(lib: Library, runtime: Path) -> None:
    env = _env(runtime, ALEXANDRIA_WARM_IDLE="1")
    cli("publish", "-", home=lib.homes["owner"], env=env, stdin=json.dumps(_reply("idle")))
    sock = _socket(runtime)
    deadline = time.monotonic() + 20
    while (sock.exists() or _warm_pids(runtime)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sock.exists() and not _warm_pids(runtime)


def test_a_stopped_warm_process_takes_its_socket_along(lib: Library, runtime: Path) -> None:
    cli("publish", "-", home=lib.homes["owner"], env=_env(runtime),
        stdin=json.dumps(_reply("stopped")))
    sock = _socket(runtime)
    for pid in _warm_pids(runtime):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while (sock.exists() or _warm_pids(runtime)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sock.exists() and not _warm_pids(runtime)


def test_ctrl_c_reaches_the_command_and_the_envelope_stays_pending(
        lib: Library, runtime: Path, tmp_path: Path) -> None:
    """A library that never answers: SIGINT to the caller interrupts the fork that runs the
    command (exit 130), and the signed envelope is kept for ``alexandria retry``."""
    home = tmp_path / "silent-home"
    home.mkdir()
    for name in ("worker.key", "certificate.json", "genesis.json", "names"):
        (home / name).write_bytes((lib.homes["owner"] / name).read_bytes())
    (home / "worker.key").chmod(0o600)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        (home / "library.json").write_text(json.dumps(
            {"url": f"http://127.0.0.1:{silent.getsockname()[1]}", "genesis": lib.pin}))
        env = cli_env(home, _env(runtime, ALEXANDRIA_TIMEOUT="60"))
        cli("publish", "-", home=home, env=_env(runtime, ALEXANDRIA_TIMEOUT="1"),
            stdin=json.dumps(_reply("kept")), expect=5)  # starts the warm process
        _socket(runtime)
        # the command as a terminal's foreground job runs it: SIGINT at its default, even when
        # this suite runs as a background job (which inherits SIGINT ignored, and so would the
        # command and the warm process it starts)
        with subprocess.Popen([*CLI, "-v", "publish", "-"], env=env, cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              preexec_fn=_foreground_signals) as proc:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write(json.dumps(_reply("interrupted")))
            proc.stdin.close()
            for line in proc.stderr:  # the request is on its way
                if "written to" in line:
                    break
            time.sleep(0.3)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 130
            assert "interrupted" in proc.stderr.read()
        assert len(list((home / "pending").glob("*.json"))) == 2  # both kept, signed once
    finally:
        silent.close()
