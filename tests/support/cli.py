"""Driving the real command line against a real server on 127.0.0.1, as users do.

Every call is a subprocess of ``python cli.py …`` (the same entry point as ``alexandria``); the
server is ``alexandria serve --genesis --db --log-key`` in a child process.  The operator's
material is made with ``alexandria genesis init`` and ``alexandria authority issue``;
participants with ``worker init``, ``authority enroll``, ``authority approve``, ``worker import``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.liveserver import Server, free_port

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, str(ROOT / "cli.py")]


def cli_env(home: Path | None, env: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ALEXANDRIA_")}
    environ.update(env or {})
    if home is not None:
        environ["ALEXANDRIA_HOME"] = str(home)
    return environ


def cli(*args: str, home: Path | None = None, stdin: str | bytes | None = None,
        expect: int | None = 0, cwd: Path | None = None, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    environ = cli_env(home, env)
    data = stdin.decode() if isinstance(stdin, bytes) else stdin
    r = subprocess.run([*CLI, *args], input=data, capture_output=True, text=True, env=environ,
                       cwd=cwd or ROOT, timeout=120)
    if expect is not None:
        assert r.returncode == expect, (args, r.returncode, r.stdout, r.stderr)
    return r


def cli_json(*args: str, home: Path | None = None, stdin: str | None = None) -> Any:
    return json.loads(cli("--json", *args, home=home, stdin=stdin).stdout)


@dataclass
class Library:
    """An operator directory, its server and the participants made through the CLI."""

    base: Path
    port: int
    pin: str = ""
    homes: dict[str, Path] = field(default_factory=dict)
    server: Server | None = None
    database: Path | str | None = None  # default: base/library.db

    @property
    def operator(self) -> Path:
        return self.base / "operator"

    @property
    def db(self) -> Path | str:
        """The library's database: a SQLite file, or a PostgreSQL URL (``module_db``)."""
        return self.database if self.database is not None else self.base / "library.db"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def create(cls, base: Path, db: Path | str | None = None) -> Library:
        op = base / "operator"
        pin = cli("genesis", "init", "--dir", str(op), "--library", "cli-test",
                  "--origin", "127.0.0.1/cli-test/log").stdout.strip()
        lib = cls(base, free_port(), pin, database=db)
        lib.start()
        cli("authority", "issue", "--dir", str(op), "--library", lib.url)
        cli("authority", "issue", "--dir", str(op), "--library", lib.url, "--roles", "log")
        return lib

    def start(self) -> None:
        """``alexandria serve --genesis --db [--log-key]``, on the same port every time."""
        log_key = self.operator / "log.key"
        self.server = Server(self.operator / "genesis.json", self.db,
                             log_key if log_key.exists() else None, port=self.port)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

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


def write_content(path: Path, content: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))
    return path


def module_library(tmp_path_factory: pytest.TempPathFactory, name: str,
                   db: Callable[[Path], Path | str] | None = None, *, signing: bool = False,
                   participants: tuple[str, ...] = ()) -> Iterator[Library]:
    """A module's live library made through the CLI in a fresh directory ``name`` (``db``: the
    database for a path, e.g. ``module_db``), restarted with the log key ``create`` issued when
    ``signing`` (checkpoints get signed), with ``participants`` set up; stopped after."""
    base = tmp_path_factory.mktemp(name)
    library = Library.create(base, None if db is None else db(base / "library.db"))
    try:
        if signing:
            library.stop()
            library.start()
        for who in participants:
            library.participant(who)
        yield library
    finally:
        library.stop()
