"""Process supervision of ``alexandria serve`` (docs/operations.md, "Processes and exit
statuses"): real servers whose processes are killed and signalled.  Each server runs in its own
session, so every process it ever started — an orphan included — is found by its session id,
and each test checks that none is left."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.core.timestamps import format_ms, now_ms
from alexandria.service.bootstrap import Founding
from alexandria.service.supervisor import RUN_DIR_PREFIX, stale_run_dirs
from tests.support.live import gapless_log
from tests.support.liveserver import NewDb, Server, serving, write_library_files
from tests.support.processes import http_workers, wait_for_workers, writer_pid

#: a stop must end within the supervisor's deadline (10 s) plus this machine's slack
STOP_S = 20.0
#: children of a killed main process must be gone within this long
GONE_S = 5.0


def session_processes(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def wait_gone(sid: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def kill_session(sid: int) -> None:
    for pid in session_processes(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def port_free(port: int) -> bool:
    """No socket listens on ``port`` (a bind could still fail for a moment: on a busy machine
    another process's outgoing connection may take the released port as its own)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                    return False
    return True


def wait_port_free(port: int, timeout: float = GONE_S) -> bool:
    """Whether ``port`` is free within ``timeout`` (the kernel closes a killed process's
    sockets a moment after it leaves the process table)."""
    deadline = time.monotonic() + timeout
    while not port_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("alexandria-*"))


@pytest.fixture
def tmpdir_env() -> Iterator[Path]:
    """A short private TMPDIR for the servers (their run directories; a Unix socket's path is
    at most 107 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="ax-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class Library:
    """One library on disk, the contributions it acknowledged, and its final check."""

    def __init__(self, tmp_path: Path, founding: Founding, new_db: NewDb, run_tmp: Path) -> None:
        self.founding = founding
        self.genesis, self.log_key = write_library_files(founding, tmp_path)
        self.db = new_db(tmp_path / "library.db")
        self.env = {"TMPDIR": str(run_tmp)}
        self.acknowledged: list[str] = []
        self._authorities = False
        self._next = 0

    def start(self, workers: int = 2, extra: tuple[str, ...] = (), ready: bool = True,
              port: int | None = None) -> Server:
        return Server(self.genesis, self.db, self.log_key, port=port, workers=workers,
                      extra=extra, ready=ready, env=self.env)

    def publish(self, url: str, n: int = 5) -> None:
        """``n`` new contributions, each acknowledged (201) and remembered."""
        with httpx.Client(base_url=url, timeout=30) as http:
            if not self._authorities:
                for doc in self.founding.authority_documents():
                    assert http.post("/api/authority", json=doc).status_code in (200, 201)
                self._authorities = True
            peer = self.founding.participants["peer"]
            base = now_ms() - 600_000
            for _ in range(n):
                self._next += 1
                body = {"kind": "claim", "title": f"Supervised {self._next}",
                        "body": {"statement": f"S {self._next}", "scope": "All",
                                 "assumptions": []},
                        "links": [], "previous": ""}
                env = peer.envelope(self.founding.genesis, body, format_ms(base + self._next))
                r = http.post("/api/entries", content=json.dumps(env).encode())
                assert r.status_code == 201, r.text
                self.acknowledged.append(r.json()["id"])

    def check(self) -> None:
        """Every acknowledged contribution served, the log gapless, ``verify`` passing."""
        with serving(self.genesis, self.db, self.log_key) as server, httpx.Client() as http:
            for rev in self.acknowledged:
                assert http.get(f"{server.url}/api/entries/{rev}").status_code == 200, rev
            verify = subprocess.run(
                [sys.executable, "-m", "alexandria.cli", "verify", "--genesis-pin",
                 self.founding.genesis.pin, "--url", server.url, "--workers", "0",
                 "--allow-uncovered"],
                capture_output=True, timeout=120,
            )
            assert verify.returncode == 0, verify.stderr.decode()
        assert len(gapless_log(self.db)) >= 2 + len(self.acknowledged)


@pytest.fixture
def library(tmp_path: Path, founding: Founding, new_db: NewDb, tmpdir_env: Path) -> Library:
    return Library(tmp_path, founding, new_db, tmpdir_env)


@contextlib.contextmanager
def reaped(server: Server) -> Iterator[Server]:
    """Whatever happens in the block, no process of ``server`` outlives it."""
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.stop()
        kill_session(server.proc.pid)
        server.proc.wait()
        if server.proc.stderr:
            server.proc.stderr.close()


def _stderr(server: Server) -> str:
    assert server.proc.stderr is not None
    return server.proc.stderr.read().decode(errors="replace")


def _exited(server: Server, timeout: float = STOP_S) -> int:
    try:
        return server.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server did not exit within {timeout:.0f} s")


# --- the writer ------------------------------------------------------------------------------

@pytest.mark.parametrize(("workers", "extra"), [(2, ()), (1, ("--writer-process",))],
                         ids=["workers-2", "writer-process"])
def test_a_killed_writer_stops_the_server_with_status_1(
    library: Library, tmpdir_env: Path, workers: int, extra: tuple[str, ...],

) -> None:
    """A server whose writer died would answer every admission 503: it stops, and its exit
    status is 1, so ``Restart=on-failure`` starts it again."""
    with reaped(library.start(workers, extra)) as server:
        library.publish(server.url)
        os.kill(writer_pid(server), signal.SIGKILL)
        assert _exited(server) == 1
        assert "the admission writer process exited (killed by SIGKILL)" in _stderr(server)
        assert wait_gone(server.proc.pid, GONE_S) == []
        assert wait_port_free(server.port)
        assert run_dirs(tmpdir_env) == []
    library.check()


# --- the main process ------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_the_children_die_with_the_main_process(
    library: Library, tmpdir_env: Path, workers: int
) -> None:
    """kill -9 of the main process alone: no HTTP worker keeps the port (or admits
    unsupervised), the writer closes and removes the run directory, and a new server binds
    the same port at once."""
    with reaped(library.start(workers)) as server:
        library.publish(server.url)
        wait_for_workers(server, workers)
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        assert wait_gone(server.proc.pid, GONE_S) == []
        assert wait_port_free(server.port)
        assert run_dirs(tmpdir_env) == []
        with reaped(library.start(workers, port=server.port)) as again:
            library.publish(again.url)
    library.check()


#: the raw ``exit`` system call, which ends the calling thread only (glibc's ``_exit`` ends the
#: whole process)
_SYS_EXIT = {"x86_64": 60, "aarch64": 93}
_DYING_PARENT = """
import ctypes, platform, subprocess, sys, threading, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
threading.Thread(target=time.sleep, args=(3,)).start()
time.sleep(0.5)
ctypes.CDLL(None).syscall(int(sys.argv[3]), 0)  # the main thread ends, the other goes on
"""
_CHILD = """
import os, signal, sys, time
from alexandria.service.supervisor import die_with_parent, parent_gone
heard = []
parent = os.getppid()
signal.signal(signal.SIGTERM, lambda *_: heard.append((os.getppid() == parent,
                                                       parent_gone(parent))))
die_with_parent(signal.SIGTERM, parent)
while not heard:
    time.sleep(0.01)
open(sys.argv[1], "w").write(repr(heard[0]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine not in _SYS_EXIT,
                    reason="the parent-death signal and the raw exit call are Linux's")
def test_a_child_knows_its_parent_is_dying_before_getppid_says_so(tmp_path: Path) -> None:
    """The thread that started a child ends first, its process's other threads later: the
    child hears its parent-death signal while ``getppid`` still names the parent (so the
    writer of a killed server, which stops on that signal, still removes the run
    directory)."""
    said = tmp_path / "said"
    subprocess.run([sys.executable, "-c", _DYING_PARENT, _CHILD, str(said),
                    str(_SYS_EXIT[os.uname().machine])], check=True, timeout=30)
    deadline = time.monotonic() + 10
    while not said.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    # (the parent still named, the parent gone)
    assert said.read_text() == "(True, True)"


# --- the HTTP workers ------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_a_killed_http_worker_is_restarted(library: Library, workers: int) -> None:
    with reaped(library.start(workers)) as server:
        library.publish(server.url)
        before = wait_for_workers(server, workers)
        os.kill(before[0], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            assert server.proc.poll() is None, f"the server exited: {_stderr(server)}"
            after = http_workers(server)
            if len(after) == workers and before[0] not in after:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200:
                        break
            assert time.monotonic() < deadline, "no worker took the killed one's place"
            time.sleep(0.1)
        library.publish(server.url)
        os.kill(server.proc.pid, signal.SIGTERM)
        assert _exited(server) == 0
        assert wait_gone(server.proc.pid, GONE_S) == []
    library.check()


def test_a_crash_looping_http_worker_stops_the_server_with_status_1(library: Library) -> None:
    """A worker that dies again within seconds of its restart is not restarted forever."""
    with reaped(library.start(1)) as server:
        first = wait_for_workers(server, 1)[0]
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not (second := [p for p in http_workers(server) if p != first]):
            assert time.monotonic() < deadline and server.proc.poll() is None
            time.sleep(0.01)
        os.kill(second[0], signal.SIGKILL)
        assert _exited(server) == 1
        assert "an HTTP worker process died again" in _stderr(server)
        assert wait_gone(server.proc.pid, GONE_S) == []
        assert wait_port_free(server.port)


# --- stop signals ----------------------------------------------------------------------------

#: (delay after the start in seconds, or "ready": as soon as the port accepts connections,
#: then which signal, and whether to the main process alone or to the whole process group)
_STOPS: list[tuple[float | str, int, bool]] = [
    ("ready", signal.SIGTERM, True), ("ready", signal.SIGTERM, False),
    (0.0, signal.SIGTERM, False), (0.15, signal.SIGTERM, True), (0.4, signal.SIGTERM, False),
    (0.8, signal.SIGINT, True), (1.2, signal.SIGTERM, True), (1.8, signal.SIGTERM, False),
    ("ready", signal.SIGINT, True), ("ready", signal.SIGTERM, True),
    (3.0, signal.SIGTERM, True),
]


def _stop_during_start_up(library: Library, when: float | str, sig: int, group: bool) -> None:
    server = library.start(2, ready=False)
    with reaped(server):
        if when == "ready":
            server.wait_ready()
        else:
            assert isinstance(when, float)
            time.sleep(when)
        if group:
            os.killpg(server.proc.pid, sig)
        else:
            os.kill(server.proc.pid, sig)
        status = _exited(server)
        # 0 once the server has installed its handlers. Before (the interpreter and the CLI
        # starting, nothing created yet) SIGTERM's default action ends it; SIGINT raises
        # KeyboardInterrupt, which the CLI turns into 130 and which, while the interpreter is
        # still importing or compiling the CLI (a fresh clone has no bytecode yet), ends it by
        # SIGINT itself
        allowed = (0, -sig) if sig == signal.SIGTERM else (0, 130, -sig)
        assert status in allowed, (status, _stderr(server))
        assert wait_gone(server.proc.pid, GONE_S) == []
        assert wait_port_free(server.port)
        assert run_dirs(Path(library.env["TMPDIR"])) == []


def test_a_stop_signal_at_any_moment_of_start_up_stops_every_process(library: Library) -> None:
    with reaped(library.start(2)) as server:
        library.publish(server.url)
    for when, sig, group in _STOPS:
        _stop_during_start_up(library, when, sig, group)
    library.check()


def test_children_that_do_not_stop_are_killed(library: Library, tmpdir_env: Path) -> None:
    """A stop does not wait for a child that ignores it (here: stopped with SIGSTOP)."""
    with reaped(library.start(2)) as server:
        library.publish(server.url)
        stuck = [*wait_for_workers(server, 2), writer_pid(server)]
        for pid in stuck:
            os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        os.kill(server.proc.pid, signal.SIGTERM)
        assert _exited(server) == 0
        assert time.monotonic() - started < 12  # the supervisor's 10 s deadline, and slack
        assert wait_gone(server.proc.pid, GONE_S) == []
        assert wait_port_free(server.port)
        assert run_dirs(tmpdir_env) == []
    library.check()


# --- the run directory -----------------------------------------------------------------------

def test_a_killed_servers_run_directory_is_removed_at_the_next_start(
    library: Library, tmpdir_env: Path
) -> None:
    with reaped(library.start(1, ("--writer-process",))) as server:
        library.publish(server.url)
        server.kill()  # every process at once: nobody removes the directory
        assert wait_gone(server.proc.pid, GONE_S) == []
        left = run_dirs(tmpdir_env)
        assert len(left) == 1
    with reaped(library.start(1, ("--writer-process",))) as again:
        now = run_dirs(tmpdir_env)
        assert len(now) == 1 and now != left
        assert now[0].name.startswith(f"{RUN_DIR_PREFIX}{again.proc.pid}-")
        again.kill()
    assert len(run_dirs(tmpdir_env)) == 1
    with reaped(library.start(1)):  # one process, no run directory of its own
        assert run_dirs(tmpdir_env) == []
    library.check()


def test_stale_run_directories_are_those_of_dead_servers(tmpdir_env: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmpdir_env / f"{RUN_DIR_PREFIX}{dead.pid}-x"
    live = tmpdir_env / f"{RUN_DIR_PREFIX}{os.getppid()}-y"
    legacy = tmpdir_env / "alexandria-writer-z"
    listening = tmpdir_env / "alexandria-writer-w"
    for d in (stale, live, legacy, listening):
        d.mkdir()
    (legacy / "writer.sock").touch()
    young = tmpdir_env / "alexandria-writer-v"  # an earlier version's server still starting
    young.mkdir()
    hour_ago = time.time() - 3700
    for d in (legacy, listening):
        os.utime(d, (hour_ago, hour_ago))
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(listening / "writer.sock"))
        s.listen()
        found: Any = stale_run_dirs(tmpdir_env)
    assert sorted(found) == sorted([stale, legacy])
