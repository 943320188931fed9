"""A hostile or failing origin cannot exhaust, hang or fool a follower (``alexandria mirror``,
``alexandria restore --catch-up URL``): answers larger than the protocol allows are refused at
their cap (the bytes the origin manages to send and the follower's peak memory are measured),
a page that does not advance is a typed error after a bounded number of requests, SIGTERM
during a slow answer stops within seconds with what was verified kept, and a mirror whose
origin is gone says so on ``/healthz`` with its lag against the origin's last known size."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.audit.answer_caps import CHECKPOINT_BYTES, ENTRIES_PAGE_BYTES
from alexandria.service.bootstrap import Founding
from tests.support.hostile_origin import (
    HostileOrigin,
    MiB,
    constant,
    hostile_origin,
    query,
    stall_when,
)
from tests.support.hostile_origin import stream as stream_of
from tests.support.liveserver import Command, NewDb, Server, serving, write_library_files
from tests.support.ops import Writer, cli, leaf_hashes, log_size, started_writer, wait_for

pytestmark = pytest.mark.slow

#: what the kernel may have accepted from the origin beyond what the follower read: the
#: loopback socket buffers of both sides (tcp_wmem, tcp_rmem), generously
IN_FLIGHT = 24 * MiB
#: a follower's peak memory, at most: an idle mirror (interpreter, app, storage) is about 100
#: MiB; before answers were capped per route, one oversized answer cost more than 500 MiB
PEAK_MIB = 250


def mirror_of(url: str, db: Path | str, pin: str, *extra: str) -> Command:
    return Command(["mirror", "--from", url, "--db", str(db), "--pin", pin, *extra])


def reap(proc: subprocess.Popen[Any], timeout: float) -> tuple[int, float]:
    """Wait for ``proc`` (killing its group after ``timeout``); its exit status and its peak
    resident memory in MiB: the largest ``VmHWM`` seen while it ran (the high-water mark of the
    program it runs; ``wait4``'s ``ru_maxrss`` would also count the test process's own memory,
    which the child holds between ``fork`` and ``exec``)."""
    deadline = time.monotonic() + timeout
    peak_kib = 0
    while True:
        peak_kib = max(peak_kib, _high_water_kib(proc.pid))
        pid, status, _usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything it left in its group
            return proc.returncode, peak_kib / 1024
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.02)


def _high_water_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def stop(command: Server, timeout: float = 30) -> tuple[float, int, float, str]:
    """SIGTERM, as a supervisor sends it: ``(seconds to exit, status, peak MiB, stderr)``."""
    started = time.monotonic()
    os.killpg(command.proc.pid, signal.SIGTERM)
    status, peak = reap(command.proc, timeout)
    return time.monotonic() - started, status, peak, read_stderr(command.proc)


def read_stderr(proc: subprocess.Popen[Any]) -> str:
    assert proc.stderr is not None
    text: str = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return text


def start_cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "alexandria.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def origin_with(tmp_path: Path, founding: Founding, db: Path | str, entries: int,
                ) -> tuple[Path, Path]:
    """genesis.json and log.key of a library whose database ``db`` holds ``entries`` entries
    after its authority documents (served and stopped again)."""
    genesis, log_key = write_library_files(founding, tmp_path / "origin")
    with serving(genesis, db, log_key) as origin:
        started_writer(founding, origin.url, entries).close()
    return genesis, log_key


def origin_and_copy(tmp_path: Path, founding: Founding, entries: int
                    ) -> tuple[Path, Path, Path, Path]:
    """``origin_with`` ``entries`` at ``origin/lib.db``, and a backup of it at ``copy.db``."""
    db = tmp_path / "origin" / "lib.db"
    genesis, log_key = origin_with(tmp_path, founding, db, entries)
    copy = tmp_path / "copy.db"
    cli("backup", "--db", str(db), str(copy))
    return genesis, log_key, db, copy


def checkpoint_now(url: str) -> int:
    """Make the origin sign its whole tree; the size signed."""
    r = httpx.get(f"{url}/api/log/checkpoint", timeout=30)
    assert r.status_code == 200, r.text
    return int(r.text.split("\n")[1])


def bounded_sending(hostile: HostileOrigin, routes: tuple[str, ...], cap: int) -> None:
    """Each oversized answer cost the origin at most the cap plus what the kernel buffered:
    the follower stopped reading at the cap (the origin offered 300 MiB each time)."""
    answers = sum(hostile.count(r) for r in routes)
    assert answers >= 1
    assert hostile.sent <= answers * (cap + IN_FLIGHT), (hostile.sent, answers)


# --- answers larger than the protocol allows ---------------------------------------------------


def test_mirror_reads_no_answer_beyond_its_route_cap(tmp_path: Path, founding: Founding) -> None:
    db = tmp_path / "origin" / "lib.db"
    genesis, log_key = origin_with(tmp_path, founding, db, 5)
    with serving(genesis, db, log_key) as origin, hostile_origin(origin.url) as hostile:
        # a checkpoint that runs to the end of the connection, then pages of entries in chunks
        hostile.routes["/api/log/checkpoint"] = stream_of(chunked=False)
        replica = mirror_of(hostile.url, tmp_path / "mirror.db", founding.genesis.pin)
        try:
            wait_for(lambda: hostile.count("/api/log/checkpoint") >= 2, 60, "two checkpoints")
            del hostile.routes["/api/log/checkpoint"]
            hostile.routes["/api/log/entries"] = stream_of(chunked=True)
            wait_for(lambda: hostile.count("/api/log/entries") >= 2, 60, "two entry pages")
            health = httpx.get(f"{replica.url}/healthz", timeout=10).json()
        finally:
            seconds, status, peak, err = stop(replica)
        bounded_sending(hostile, ("/api/log/checkpoint", "/api/log/entries"),
                        max(CHECKPOINT_BYTES, ENTRIES_PAGE_BYTES))
    assert "ANSWER_TOO_LARGE" in err and "/api/log/checkpoint" in err, err
    assert "/api/log/entries" in err, err
    assert peak < PEAK_MIB, f"the mirror peaked at {peak:.0f} MiB"
    assert status == 0 and seconds < 10, (status, seconds, err)
    assert health["ready"] is False and health["log_size"] == 0, health
    assert leaf_hashes(tmp_path / "mirror.db") == []


def test_catch_up_reads_no_answer_beyond_its_route_cap(
    tmp_path: Path, founding: Founding
) -> None:
    genesis, log_key, db, copy = origin_and_copy(tmp_path, founding, 5)
    kept = leaf_hashes(copy)
    with serving(genesis, db, log_key) as origin, hostile_origin(origin.url) as hostile:
        writer = Writer(founding, origin.url)
        writer.publish(10)
        writer.close()
        hostile.routes["/api/log/entries"] = stream_of(chunked=True)
        proc = start_cli("restore", "--db", str(copy), "--catch-up", hostile.url)
        status, peak = reap(proc, 60)
        err = read_stderr(proc)
        assert proc.stdout is not None
        proc.stdout.close()
        bounded_sending(hostile, ("/api/log/entries",), ENTRIES_PAGE_BYTES)
        assert hostile.count("/api/log/entries") <= 2  # a failure, not a retry loop
    assert status == 1, (status, err)
    assert "ANSWER_TOO_LARGE" in err, err
    assert peak < PEAK_MIB, f"the catch-up peaked at {peak:.0f} MiB"
    assert leaf_hashes(copy) == kept


# --- pages that do not advance -----------------------------------------------------------------


STUCK_PAGES = {
    "/api/log/checkpoints": b'{"checkpoints":[],"next":0}',
    "/api/log/entries": b'{"entries":[],"next":0}',
}


@pytest.mark.parametrize("route", list(STUCK_PAGES))
def test_a_page_that_does_not_advance_stops_the_mirror(
    tmp_path: Path, founding: Founding, route: str
) -> None:
    db = tmp_path / "origin" / "lib.db"
    genesis, log_key = origin_with(tmp_path, founding, db, 5)
    with serving(genesis, db, log_key) as origin, hostile_origin(origin.url) as hostile:
        hostile.routes[route] = constant(STUCK_PAGES[route])
        replica = mirror_of(hostile.url, tmp_path / "mirror.db", founding.genesis.pin)
        status, _peak = reap(replica.proc, 30)  # it stops on its own
        err = read_stderr(replica.proc)
        asked = hostile.count(route)
    assert status == 6, (status, err)  # verification failed (docs/cli.md)
    assert "BAD_PAGE" in err and ("does not advance" in err or "holds 0 entries" in err), err
    assert asked <= 2, asked


def test_a_page_that_does_not_advance_stops_the_catch_up(
    tmp_path: Path, founding: Founding
) -> None:
    genesis, log_key, db, copy = origin_and_copy(tmp_path, founding, 5)
    with serving(genesis, db, log_key) as origin, hostile_origin(origin.url) as hostile:
        checkpoint_now(origin.url)
        writer = Writer(founding, origin.url)
        writer.publish(5)
        writer.close()
        hostile.routes["/api/log/checkpoints"] = constant(STUCK_PAGES["/api/log/checkpoints"])
        proc = start_cli("restore", "--db", str(copy), "--catch-up", hostile.url)
        status, _peak = reap(proc, 60)
        err = read_stderr(proc)
        assert proc.stdout is not None
        proc.stdout.close()
        asked = hostile.count("/api/log/checkpoints")
    assert status == 6, (status, err)
    assert "BAD_PAGE" in err and "does not advance" in err, err
    assert asked == 1


# --- SIGTERM during a slow answer --------------------------------------------------------------


def stalled_beyond(size: int, stalled: threading.Event) -> Any:
    """Entries pages answer as the origin does up to leaf ``size``; a page beyond it starts
    and never finishes."""
    return stall_when(lambda target: int(query(target)["start"]) >= size, stalled)


def test_sigterm_stops_a_mirror_waiting_on_a_slow_origin(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    db = tmp_path / "origin" / "lib.db"
    genesis, log_key = origin_with(tmp_path, founding, db, 20)
    mirror_db = new_db(tmp_path / "mirror.db")
    stalled = threading.Event()
    with serving(genesis, db, log_key) as origin, hostile_origin(origin.url) as hostile:
        first = checkpoint_now(origin.url)
        hostile.routes["/api/log/entries"] = stalled_beyond(first, stalled)
        replica = mirror_of(hostile.url, mirror_db, founding.genesis.pin)
        try:
            wait_for(lambda: log_size(replica.url) == first, 60, "the first entries")
            writer = Writer(founding, origin.url)
            writer.publish(10)
            writer.close()
            checkpoint_now(origin.url)
            assert stalled.wait(60), "the mirror never asked beyond the first entries"
        finally:
            seconds, status, _peak, err = stop(replica)
        honest = leaf_hashes(db)
    assert seconds < 8, f"the mirror took {seconds:.1f} s to stop: {err}"
    assert status == 0, (status, err)
    assert f"{first} entries verified and stored are kept" in err, err
    assert leaf_hashes(mirror_db) == honest[:first]


def test_sigterm_stops_a_catch_up_waiting_on_a_slow_source(
    tmp_path: Path, founding: Founding
) -> None:
    genesis, log_key, db, copy = origin_and_copy(tmp_path, founding, 5)
    before = len(leaf_hashes(copy))
    stalled = threading.Event()
    with serving(genesis, db, log_key) as origin, hostile_origin(origin.url) as hostile:
        writer = Writer(founding, origin.url)
        writer.publish(10)
        middle = checkpoint_now(origin.url)
        writer.publish(10)
        writer.close()
        checkpoint_now(origin.url)
        hostile.routes["/api/log/entries"] = stalled_beyond(middle, stalled)
        proc = start_cli("restore", "--db", str(copy), "--catch-up", hostile.url)
        try:
            assert stalled.wait(60), "the catch-up never asked beyond the middle checkpoint"
        finally:
            started = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)
            status, _peak = reap(proc, 30)
            seconds = time.monotonic() - started
        err = read_stderr(proc)
        assert proc.stdout is not None
        proc.stdout.close()
        honest = leaf_hashes(db)
    assert seconds < 8, f"the catch-up took {seconds:.1f} s to stop: {err}"
    assert status == 130, (status, err)  # interrupted (docs/cli.md)
    assert f"the {middle - before} entries verified and stored" in err, err
    assert leaf_hashes(copy) == honest[:middle]


# --- a mirror whose origin is gone -------------------------------------------------------------


def test_a_mirror_whose_origin_is_gone_is_not_ready_and_lags(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    """The origin grows while its entries cannot be fetched (the mirror sees its signed size),
    then goes away: the mirror is not ready, says why, and its lag is what it misses."""
    db = tmp_path / "origin" / "lib.db"
    genesis, log_key = origin_with(tmp_path, founding, db, 5)
    mirror_db = new_db(tmp_path / "mirror.db")
    unavailable = b'{"error":"maintenance","code":"UNAVAILABLE","details":{}}'
    origin = Server(genesis, db, log_key)
    try:
        with hostile_origin(origin.url) as relay:
            replica = mirror_of(relay.url, mirror_db, founding.genesis.pin, "--stale-after", "2")
            try:
                synced = checkpoint_now(origin.url)
                wait_for(lambda: health_of(replica)["log_size"] == synced, 60, "the mirror")
                health = health_of(replica)
                assert health["ready"] is True and health["lag"] == 0, health
                # the origin grows; its checkpoint is to be had, its entries are not
                relay.routes["/api/log/entries"] = constant(unavailable, 503)
                writer = Writer(founding, origin.url)
                writer.publish(7)
                writer.close()
                grown = checkpoint_now(origin.url)
                wait_for(lambda: health_of(replica)["origin_size"] == grown, 30,
                         "the mirror to see the origin's new size")
                origin.stop()  # the origin is gone
                wait_for(lambda: not health_of(replica)["ready"], 30,
                         "the mirror to say it is not ready")
                r = httpx.get(f"{replica.url}/healthz", timeout=10)
                metrics = httpx.get(f"{replica.url}/metrics", timeout=10).text
            finally:
                _seconds, status, _peak, err = stop(replica)
    finally:
        origin.stop()
    health = r.json()
    assert r.status_code == 503 and health["ready"] is False, health
    assert health["log_size"] == synced and health["origin_size"] == grown, health
    assert health["lag"] == grown - synced > 0, health
    assert any(f"{relay.url} has not answered" in reason for reason in health["reasons"]), health
    assert f"alexandria_mirror_lag_entries {float(grown - synced)}" in metrics, metrics
    assert status == 0, (status, err)


def health_of(command: Server) -> Any:
    return httpx.get(f"{command.url}/healthz", timeout=10).json()
