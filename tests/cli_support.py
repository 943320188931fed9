"""Driving the real command line against a real server on 127.0.0.1, as users do.

Every call is a subprocess of ``python cli.py …`` (the same entry point as ``alexandria``); the
server is ``alexandria serve --genesis --db --log-key`` in a child process.  The operator's
material is made with ``alexandria genesis init`` and ``alexandria authority issue``;
participants with ``worker init``, ``authority enroll``, ``authority approve``, ``worker import``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, str(ROOT / "cli.py")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cli(*args: str, home: Path | None = None, stdin: str | bytes | None = None,
        expect: int | None = 0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALEXANDRIA_")}
    if home is not None:
        env["ALEXANDRIA_HOME"] = str(home)
    data = stdin.decode() if isinstance(stdin, bytes) else stdin
    r = subprocess.run([*CLI, *args], input=data, capture_output=True, text=True, env=env,
                       cwd=cwd or ROOT, timeout=120)
    if expect is not None:
        assert r.returncode == expect, (args, r.returncode, r.stdout, r.stderr)
    return r


def cli_json(*args: str, home: Path | None = None, stdin: str | None = None) -> Any:
    return json.loads(cli("--json", *args, home=home, stdin=stdin).stdout)


class Server:
    """``alexandria serve`` in a child process."""

    def __init__(self, operator: Path, db: Path, port: int) -> None:
        self.operator, self.db, self.port = operator, db, port
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["serve", "--genesis", str(self.operator / "genesis.json"), "--db", str(self.db),
                "--port", str(self.port)]
        if (self.operator / "log.key").exists():
            args += ["--log-key", str(self.operator / "log.key")]
        self.process = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, cwd=ROOT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.process.stderr.read()!r}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{self.url}/api/genesis", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None


@dataclass
class Library:
    """An operator directory, its server and the participants made through the CLI."""

    base: Path
    server: Server
    pin: str = ""
    homes: dict[str, Path] = field(default_factory=dict)

    @property
    def operator(self) -> Path:
        return self.base / "operator"

    @property
    def url(self) -> str:
        return self.server.url

    @classmethod
    def create(cls, base: Path, port: int | None = None) -> Library:
        op = base / "operator"
        pin = cli("genesis", "init", "--dir", str(op), "--library", "cli-test",
                  "--origin", "127.0.0.1/cli-test/log").stdout.strip()
        lib = cls(base, Server(op, base / "library.db", port or free_port()), pin)
        lib.server.start()
        cli("authority", "issue", "--dir", str(op), "--library", lib.url)
        cli("authority", "issue", "--dir", str(op), "--library", lib.url, "--roles", "log")
        return lib

    def restart(self) -> None:
        self.server.stop()
        self.server.start()

    def participant(self, name: str, scopes: str = "all") -> Path:
        home = self.base / "homes" / name
        key = cli("worker", "init", "--library", self.url, "--genesis", self.pin,
                  home=home).stdout.strip()
        cli("authority", "enroll", name, "--dir", str(self.operator))
        cert = cli("authority", "approve", "--dir", str(self.operator), "--actor", name,
                   "--worker", key, "--scopes", scopes, "--days", "30").stdout
        cli("worker", "import", "-", home=home, stdin=cert)
        self.homes[name] = home
        return home

    def close(self) -> None:
        self.server.stop()


def write_content(path: Path, content: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))
    return path


def copy_db(src: Path, dst: Path) -> None:
    """The database with its WAL files (the server must be stopped)."""
    for suffix in ("", "-wal", "-shm"):
        s = Path(f"{src}{suffix}")
        d = Path(f"{dst}{suffix}")
        if s.exists():
            shutil.copyfile(s, d)
        else:
            d.unlink(missing_ok=True)
