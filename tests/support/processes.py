"""The processes of a live ``alexandria serve`` (tests/support/liveserver.py), found through
``/proc``: its children, the admission writer process and Granian's HTTP workers."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from tests.support.liveserver import Server


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text()
                          .split()]
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def writer_pid(server: Server) -> int:
    writers = [p for p in children(server.proc.pid) if b"spawn_main" in cmdline(p)]
    assert len(writers) == 1, writers
    return writers[0]


def http_workers(server: Server) -> list[int]:
    """Granian's workers: forked from the main process, so run by the same command line."""
    main = cmdline(server.proc.pid)
    return [p for p in children(server.proc.pid) if cmdline(p) == main]


def wait_for_workers(server: Server, count: int, timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(workers := http_workers(server)) != count:
        assert time.monotonic() < deadline, f"{len(workers)} HTTP workers, not {count}"
        assert server.proc.poll() is None, f"the server exited ({server.proc.returncode})"
        time.sleep(0.05)
    return workers
