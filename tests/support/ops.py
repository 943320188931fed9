"""Helpers of the operations tests: live libraries, admissions over HTTP, mirrors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from alexandria.core.timestamps import format_ms, now_ms
from alexandria.service.bootstrap import Founding
from alexandria.store.backends import open_readonly
from tests.support.admission import claim, space
from tests.support.liveserver import Command, NewDb, Server, write_library_files


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-m", "alexandria.cli", *args], capture_output=True,
                         text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


class Writer:
    """Publishes as ``owner`` to a live library: a space, then claims in it."""

    def __init__(self, founding: Founding, url: str) -> None:
        self.founding = founding
        self.client = httpx.Client(base_url=url, timeout=30)
        self.root = ""
        self.acknowledged: list[str] = []
        self.count = 0

    def admit_authorities(self) -> None:
        for doc in self.founding.authority_documents():
            r = self.client.post("/api/authority", json=doc)
            assert r.status_code in (200, 201), r.text

    def envelope(self) -> dict[str, Any]:
        self.count += 1
        content = space("Mirrored space") if not self.root else claim(
            self.root, title=f"Claim {self.count:05d}")
        owner = self.founding.participants["owner"]
        return owner.envelope(self.founding.genesis, content, format_ms(now_ms()))

    def publish(self, n: int = 1) -> list[str]:
        out = []
        for _ in range(n):
            r = self.client.post("/api/entries", content=orjson.dumps(self.envelope()))
            assert r.status_code == 201, r.text
            rev = str(r.json()["id"])
            self.root = self.root or rev
            self.acknowledged.append(rev)
            out.append(rev)
        return out

    def close(self) -> None:
        self.client.close()


def origin_files(tmp_path: Path, founding: Founding, new_db: NewDb
                 ) -> tuple[Path, Path, Path | str]:
    """An origin library's ``genesis.json`` and ``log.key`` under ``tmp_path/origin``, and a
    fresh database of the test's backend for it."""
    genesis, log_key = write_library_files(founding, tmp_path / "origin")
    return genesis, log_key, new_db(tmp_path / "origin" / "lib.db")


def started_writer(founding: Founding, url: str, entries: int) -> Writer:
    """A ``Writer`` on ``url`` that has admitted the authority documents and ``entries``
    entries."""
    writer = Writer(founding, url)
    writer.admit_authorities()
    writer.publish(entries)
    return writer


def backed_up_midway(founding: Founding, url: str, db: Path | str, backup: Path,
                     before: int, after: int) -> Writer:
    """A ``started_writer`` with ``before`` entries, then ``alexandria backup`` of ``db`` to
    ``backup``, then ``after`` more entries."""
    writer = started_writer(founding, url, before)
    cli("backup", "--db", str(db), str(backup))
    writer.publish(after)
    return writer


def mirror(origin: str, db: Path | str, pin: str) -> Command:
    return Command(["mirror", "--from", origin, "--db", str(db), "--pin", pin])


def wait_for(check: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def same_checkpoint(a: str, b: str) -> bool:
    """The two serve the same signed checkpoint (forcing the origin to sign its tree)."""
    x = httpx.get(f"{a}/api/log/checkpoint", timeout=30)
    y = httpx.get(f"{b}/api/log/checkpoint", timeout=30)
    return x.status_code == y.status_code == 200 and x.text == y.text


def log_size(url: str) -> int:
    r = httpx.get(f"{url}/healthz", timeout=30)
    return int(r.json()["log_size"])


def leaf_hashes(db: Path | str) -> list[bytes]:
    """The stored leaf hashes of the library database ``db`` (a file or a PostgreSQL URL)."""
    with open_readonly(db) as conn:
        return [bytes(h) for (h,) in conn.execute("SELECT leaf_hash FROM log ORDER BY sequence")]


def stop_with_error(proc: Server, timeout: float = 60) -> str:
    """Wait for a command to exit on its own with status 6 (verification failed, docs/cli.md);
    its stderr."""
    proc.proc.wait(timeout)
    assert proc.proc.returncode == 6, proc.proc.returncode
    assert proc.proc.stderr is not None
    err = proc.proc.stderr.read().decode()
    proc.proc.stderr.close()
    return err


def stop_and_read(proc: Server) -> str:
    """Stop a command (SIGTERM, as an operator would) and return what it said on stderr."""
    os.killpg(proc.proc.pid, signal.SIGTERM)
    proc.proc.wait(30)
    assert proc.proc.stderr is not None
    err = proc.proc.stderr.read().decode()
    proc.proc.stderr.close()
    return err
