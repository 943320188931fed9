"""A real ``alexandria serve`` subprocess on 127.0.0.1 for black-box tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from alexandria.files import write_json
from alexandria.service.bootstrap import Founding

#: the ``new_db`` fixture (conftest.py): a fresh library database of the test's backend
NewDb = Callable[[Path], "Path | str"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_group(proc: subprocess.Popen[Any], timeout: float = 20) -> tuple[Any, Any]:
    """SIGTERM a server started in its own session (every worker and the writer too), then its
    output; SIGKILL when it does not stop in time (tests/service/test_supervision.py checks how a
    server stops; the tests using this check what it said)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate()


class StderrTee:
    """What a server started with ``stderr=PIPE`` writes to its standard error, read as it
    comes: a test can wait for a log line while the server runs.  ``stop`` stops the server's
    process group like ``stop_group`` and returns everything it wrote."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        self._proc = proc
        self._stderr = proc.stderr
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="stderr-tee", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while chunk := self._stderr.read1(65536):  # type: ignore[attr-defined]
            with self._lock:
                self._chunks.append(chunk)

    def text(self) -> str:
        with self._lock:
            return b"".join(self._chunks).decode(errors="replace")

    def stop(self, timeout: float = 20) -> str:
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._thread.join(timeout)
        if self._thread.is_alive():  # a child outlived the main process, holding the pipe
            with suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._thread.join()
        self._stderr.close()
        return self.text()


def write_library_files(founding: Founding, directory: Path) -> tuple[Path, Path]:
    """genesis.json and log.key for ``founding`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    genesis = directory / "genesis.json"
    write_json(genesis, founding.genesis_document)
    log_key = directory / "log.key"
    if not log_key.exists():
        founding.log_key.save(log_key)
    return genesis, log_key


class Server:
    def __init__(
        self,
        genesis: Path,
        db: Path | str,
        log_key: Path | None = None,
        port: int | None = None,
        workers: int = 1,
        extra: tuple[str, ...] = (),
        ready: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        """``ready=False``: return at once, before the server listens; ``env``: added to this
        process's environment."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "alexandria.cli",
            "serve",
            "--genesis",
            str(genesis),
            "--db",
            str(db),
            "--port",
            str(self.port),
        ]
        if log_key is not None:
            cmd += ["--log-key", str(log_key)]
        cmd += ["--workers", str(workers)]  # the default depends on the machine's cores
        cmd += extra
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        if ready:
            self.wait_ready()

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the server listens; a server that does not within ``timeout`` (a loaded CI
        host once took more than 30 s) is killed, its standard error in the error raised, so
        no process outlives the test that started it."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"server exited with {self.proc.returncode}: {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
        if self.proc.stderr:
            self.proc.stderr.close()
        raise RuntimeError(f"server did not listen on {self.port} within {timeout:.0f} s;"
                           f" its standard error: {err[-4000:]}")

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown handlers run."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stderr:
            self.proc.stderr.close()


@contextmanager
def serving(
    genesis: Path, db: Path | str, log_key: Path | None = None, workers: int = 1,
    extra: tuple[str, ...] = (),
) -> Iterator[Server]:
    server = Server(genesis, db, log_key, workers=workers, extra=extra)
    try:
        yield server
    finally:
        server.stop()


class Command(Server):
    """Another long-running ``alexandria`` command on 127.0.0.1 (``mirror``), stopped like a
    server."""

    def __init__(self, args: list[str], port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "alexandria.cli", *args, "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.wait_ready()
