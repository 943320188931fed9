"""What every benchmark needs to drive a real server on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, timeout: float = 30) -> None:
    """Wait until the server accepts connections (the first start on a loader database may
    migrate it: give those a long ``timeout``)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def _pids(pid: int) -> list[int]:
    """``pid`` and its direct children (worker processes)."""
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(c) for c in children.read_text().split()]
    return pids


def _fields(stat: Path) -> list[str]:
    """The fields of a ``/proc/…/stat`` after the command's name (``fields[0]`` is the state)."""
    return stat.read_text().rsplit(")", 1)[1].split()


def _cpu(stat: Path) -> float:
    fields = _fields(stat)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reaped_cpu(pid: int) -> float:
    """User + system CPU seconds of the children of ``pid`` that have ended and that it waited
    for (a server's worker processes, PostgreSQL's backends of closed connections)."""
    fields = _fields(Path(f"/proc/{pid}/stat"))
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its direct children (worker processes)."""
    total = 0.0
    for p in _pids(pid):
        try:
            total += _cpu(Path(f"/proc/{p}/stat"))
        except FileNotFoundError:
            continue
    return total


def thread_cpu(pid: int) -> dict[tuple[int, int], float]:
    """CPU seconds of every thread of ``pid`` and of its direct children, by (pid, tid)."""
    out: dict[tuple[int, int], float] = {}
    for p in _pids(pid):
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                out[(p, int(task.name))] = _cpu(task / "stat")
            except FileNotFoundError:
                continue
    return out


def process_cpu_precise(pid: int) -> float:
    """CPU seconds of the live threads of ``pid`` and of its direct children, to the nanosecond
    (``/proc/PID/task/TID/schedstat``; ``process_cpu`` counts in clock ticks of 10 ms): for the
    cost of one request.  A thread that has ended no longer counts."""
    total = 0
    for p in _pids(pid):
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total / 1e9
