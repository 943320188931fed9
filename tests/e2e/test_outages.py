"""Outages, injected into real processes: a PostgreSQL crash during admissions, a full disk
under a SQLite library, a stalled admission writer.  In each the client hears a typed 503 with
``Retry-After``, ``/healthz`` answers at once with ``ready: false`` and the reason, the log has
one line per episode (no traceback per request), the library recovers by itself once the
cause is gone, and every acknowledged contribution is still served, gapless, and passes
``alexandria verify`` (docs/operations.md, "When storage fails")."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from alexandria.core.timestamps import format_ms, now_ms
from alexandria.service.bootstrap import Founding
from alexandria.service.published import PublishedCheckpoint
from alexandria.store.backends import open_readonly
from alexandria.store.protocol import READERS
from tests.support import pgcluster
from tests.support.admission import claim, space
from tests.support.library import Clock, serve_library
from tests.support.liveserver import Server, StderrTee, stop_group, write_library_files
from tests.support.ops import Writer, cli, wait_for
from tests.support.processes import http_workers, wait_for_workers

pytestmark = pytest.mark.slow


def healthz_timed(client: httpx.Client, times: int = 5) -> tuple[list[float], dict[str, Any]]:
    """``times`` answers of ``/healthz``: how long each took, and the last one's body."""
    took, body = [], {}
    for _ in range(times):
        started = time.perf_counter()
        r = client.get("/healthz")
        took.append(time.perf_counter() - started)
        body = {"status": r.status_code, **r.json()}
    return took, body


def assert_answers_at_once(took: list[float]) -> None:
    """Within 100 ms (the median of several: the test machine is shared), never seconds."""
    assert statistics.median(took) < 0.1 and max(took) < 1.0, took


def next_envelope(writer: Writer) -> bytes:
    writer.count += 1
    owner = writer.founding.participants["owner"]
    content = claim(writer.root, title=f"Claim {writer.count:05d}")
    return orjson.dumps(owner.envelope(writer.founding.genesis, content, format_ms(now_ms())))


def _admits(writer: Writer) -> bool:
    """One admission: True when acknowledged, False on a typed 503 ``STORAGE_UNAVAILABLE``."""
    r = writer.client.post("/api/entries", content=next_envelope(writer))
    if r.status_code == 503 and r.json()["code"] == "STORAGE_UNAVAILABLE":
        return False
    assert r.status_code == 201, r.text
    writer.acknowledged.append(str(r.json()["id"]))
    return True


def assert_typed_503(r: httpx.Response, code: str) -> None:
    assert r.status_code == 503, r.text
    assert r.json()["code"] == code, r.text
    assert int(r.headers["Retry-After"]) > 0, r.headers


def assert_all_kept(founding: Founding, db: Path | str, acknowledged: list[str],
                    tmp_path: Path) -> None:
    """Every acknowledged contribution is in the log once, the sequences are 1..n, and an
    export passes ``alexandria verify``."""
    with open_readonly(db) as conn:
        sequences = [int(s) for (s,) in conn.execute("SELECT sequence FROM log ORDER BY"
                                                     " sequence")]
        ids = [str(i) for (i,) in conn.execute("SELECT id FROM revisions")]
    assert sequences == list(range(1, len(sequences) + 1))
    assert len(ids) == len(set(ids))
    assert set(acknowledged) <= set(ids), set(acknowledged) - set(ids)
    export = tmp_path / "export.jsonl"
    cli("export", "--db", str(db), "-o", str(export))
    cli("verify", "--genesis-pin", founding.genesis.pin, str(export))


def episode_lines(stderr: str, path: str, code: str) -> tuple[int, int]:
    """How many times the log said ``path`` began failing with ``code``, and recovered."""
    began = stderr.count(f"{path} failing ({code})")
    ended = sum(1 for line in stderr.splitlines()
                if f"{path} recovered" in line and f"({code};" in line)
    return began, ended


def stopped(server: Server, writer: Writer, client: httpx.Client) -> str:
    """Close the test's clients and stop the server's process group: what it wrote to stderr."""
    writer.close()
    client.close()
    _out, err = stop_group(server.proc)
    return err.decode(errors="replace")


# --- PostgreSQL crashes during admissions --------------------------------------------------------

@dataclass
class Crashable:
    """A live server over a durable PostgreSQL cluster the test may crash (``own``), with a
    writer publishing to it and a client; ``err`` what the server writes to its standard error
    as it comes, ``stderr`` all of it once the server has stopped."""

    own: pgcluster.Cluster
    url: str
    server: Server
    writer: Writer
    client: httpx.Client
    err: StderrTee
    stderr: str | None = None

    def stop(self) -> str:
        """Stop the server (once): its standard error."""
        if self.stderr is None:
            self.writer.close()
            self.client.close()
            self.stderr = self.err.stop()
        return self.stderr


@contextlib.contextmanager
def crashable(tmp_path: Path, founding: Founding, workers: int,
              extra: tuple[str, ...] = ()) -> Iterator[Crashable]:
    """``Crashable``, the server stopped at the end (or by ``Crashable.stop`` before, to check
    what it said while the cluster still runs); a failure inside carries the server's standard
    error."""
    if pgcluster.binaries() is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    genesis, log_key = write_library_files(founding, tmp_path)
    # durable: an acknowledged commit must survive the crash (the suite's clusters do not
    # fsync, which a crash test cannot use)
    with pgcluster.cluster(durable=True) as own:
        url = own.database()
        server = Server(genesis, url, log_key, workers=workers, extra=extra)
        it = Crashable(own, url, server, Writer(founding, server.url),
                       httpx.Client(base_url=server.url, timeout=30), StderrTee(server.proc))
        try:
            yield it
        except BaseException as failure:
            stderr = it.stop()
            failure.add_note(f"the server's exit status: {server.proc.returncode}; its stderr:\n"
                             + stderr)
            raise
        it.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_postgresql_crash_during_admissions(tmp_path: Path, founding: Founding,
                                            workers: int) -> None:
    """PostgreSQL stopped the hard way (``pg_ctl stop -m immediate``: every process killed,
    crash recovery at the next start) while a node admits: admissions are 503
    ``STORAGE_UNAVAILABLE`` with ``Retry-After``; ``/healthz`` and ``/metrics`` answer at once,
    not ready; once PostgreSQL is back the node admits again by itself, and nothing
    acknowledged is lost."""
    with crashable(tmp_path, founding, workers, ("--admission-deadline", "5")) as it:
        own, writer, client = it.own, it.writer, it.client
        writer.admit_authorities()
        writer.publish(5)
        own.stop("immediate")
        # without a write, every worker's probe finds the database gone
        wait_for(lambda: all(client.get("/healthz").status_code == 503 for _ in range(6)),
                 20, "healthz not ready after the crash")
        for _ in range(3):
            assert_typed_503(client.post("/api/entries", content=next_envelope(writer)),
                             "STORAGE_UNAVAILABLE")
        r = client.get(f"/api/entries/{writer.acknowledged[0]}")
        assert_typed_503(r, "STORAGE_UNAVAILABLE")
        took, body = healthz_timed(client)
        assert_answers_at_once(took)
        assert body["status"] == 503 and body["ready"] is False and body["live"] is True
        assert any("STORAGE_UNAVAILABLE" in reason for reason in body["reasons"]), body
        started = time.perf_counter()
        metrics = client.get("/metrics")
        assert time.perf_counter() - started < 1.0
        assert metrics.status_code == 200 and "alexandria_ready 0.0" in metrics.text
        own.resume()
        wait_for(lambda: client.get("/healthz").status_code == 200, 30,
                 "healthz ready once PostgreSQL is back")
        # a writer process whose connection died while idle may answer its first batch
        # 503 STORAGE_UNAVAILABLE (nothing stored) before it reconnects
        wait_for(lambda: _admits(writer), 30, "admissions resume once PostgreSQL is back")
        writer.publish(5)
        for rev in writer.acknowledged:
            assert client.get(f"/api/entries/{rev}").status_code == 200
        # a worker whose own write connection died while idle answers its first
        # checkpoint 503 STORAGE_UNAVAILABLE (Retry-After) and reconnects
        wait_for(lambda: client.get("/api/log/checkpoint").status_code == 200, 30,
                 "a checkpoint once PostgreSQL is back")
        stderr = it.stop()
        assert "Traceback" not in stderr, stderr[-4000:]
        # one episode in each process that met it first hand, never a line per request; a
        # worker whose own write connection (checkpoints) died may still be in its episode
        # when the server stops, the other having answered the checkpoint
        began, ended = episode_lines(stderr, "writes", "STORAGE_UNAVAILABLE")
        assert 1 <= began <= workers + (workers > 1) and 1 <= ended <= began, stderr[-4000:]
        assert_all_kept(founding, it.url, writer.acknowledged, tmp_path)


def waiting_workers(stderr: str) -> tuple[list[int], list[int]]:
    """The processes that said they wait for the database to open the library, and those that
    said they opened it after waiting (``Library.open_when_reachable``), one entry a line."""
    waiting = [int(pid) for pid in re.findall(r"process (\d+) cannot open the library", stderr)]
    opened = [int(pid) for pid in re.findall(r"process (\d+) opened the library after", stderr)]
    return waiting, opened


def wait_until_every_process_opened(own: pgcluster.Cluster, processes: int) -> None:
    """Until each of the server's ``processes`` (HTTP workers and the writer) holds its write
    connection and its pool of reads (``store/postgresql``), which it makes as it opens the
    library, and a moment more for the rest of its start (a few statements)."""
    def counted() -> bool:
        with psycopg.connect(own.url(), autocommit=True) as conn:
            rows = dict(conn.execute(
                "SELECT application_name, count(*) FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' GROUP BY 1").fetchall())
        return (rows.get("alexandria") == processes
                and rows.get("alexandria-read") == processes * READERS)

    wait_for(counted, 60, f"{processes} processes opened the library")
    time.sleep(1.0)


def test_an_http_worker_restarted_during_a_postgresql_outage_waits_for_the_database(
        tmp_path: Path, founding: Founding) -> None:
    """An HTTP worker that dies while PostgreSQL is down is restarted; the new worker cannot
    open the library yet and waits for the database (one log line) instead of failing its
    start, which Granian would take for a crash loop and stop the whole server.  The other
    worker answers typed 503s meanwhile; once PostgreSQL is back the new worker opens the
    library (one log line), both serve, and nothing acknowledged is lost."""
    with crashable(tmp_path, founding, 2) as it:
        own, server, writer, client = it.own, it.server, it.writer, it.client
        writer.admit_authorities()
        writer.publish(3)
        before = wait_for_workers(server, 2)
        # the worker that stays answers during the outage: it has started serving before
        wait_until_every_process_opened(own, 3)
        own.stop("immediate")
        os.kill(before[0], signal.SIGKILL)
        # the restarted worker outlives Granian's crash-loop window (5.5 s), still waiting
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            assert server.proc.poll() is None, "the server stopped during the outage"
            time.sleep(0.2)
        workers = http_workers(server)
        assert len(workers) == 2
        (restarted,) = set(workers) - set(before)
        assert waiting_workers(it.err.text()) == ([restarted], []), it.err.text()[-4000:]
        assert_typed_503(client.post("/api/entries", content=next_envelope(writer)),
                         "STORAGE_UNAVAILABLE")
        own.resume()
        wait_for(lambda: restarted in waiting_workers(it.err.text())[1], 30,
                 "the restarted worker opens the library once PostgreSQL is back")
        wait_for(lambda: all(client.get("/healthz").status_code == 200 for _ in range(6)),
                 30, "every worker ready once PostgreSQL is back")
        wait_for(lambda: _admits(writer), 30, "admissions resume once PostgreSQL is back")
        writer.publish(3)
        for rev in writer.acknowledged:
            assert client.get(f"/api/entries/{rev}").status_code == 200
        wait_for(lambda: all(client.get("/api/log/checkpoint").status_code == 200
                             for _ in range(4)), 30, "checkpoints once PostgreSQL is back")
        stderr = it.stop()
        assert server.proc.returncode == 0, stderr[-4000:]
        # the restarted worker says once that it waits and once that it opened
        assert waiting_workers(stderr) == ([restarted], [restarted]), stderr[-4000:]
        assert "Traceback" not in stderr, stderr[-4000:]
        assert_all_kept(founding, it.url, writer.acknowledged, tmp_path)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_refuses_an_unreachable_postgresql_at_start(
        tmp_path: Path, founding: Founding, workers: str) -> None:
    """At the first start nothing waits: an unreachable database is exit status 1 with
    ``STORAGE_UNAVAILABLE`` at once (only a worker restarted later waits for it)."""
    genesis, log_key = write_library_files(founding, tmp_path)
    url = f"postgresql://postgres@/library?host={tmp_path / 'no-server-here'}"
    started = time.monotonic()
    out = cli("serve", "--genesis", str(genesis), "--db", url, "--log-key", str(log_key),
              "--port", "0", "--workers", workers, check=False)
    assert out.returncode == 1 and "STORAGE_UNAVAILABLE" in out.stderr, out.stderr
    assert time.monotonic() - started < 30


# --- a full disk -------------------------------------------------------------------------------

@contextlib.contextmanager
def small_filesystem(size: str = "16m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on a fresh directory, unmounted at the end; the test is
    skipped where mounting is not permitted (not root, or a container without the right)."""
    mount = Path(tempfile.mkdtemp(prefix="alexandria-full-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                           str(mount)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a small file system to fill: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        if subprocess.run(["mountpoint", "-q", str(mount)], check=False).returncode == 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        with contextlib.suppress(OSError):
            mount.rmdir()


def fill(directory: Path) -> Path:
    """A file that takes every free byte of ``directory``'s file system."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as fh:
        for chunk in (1 << 20, 1 << 16, 1 << 12, 1 << 9):
            try:
                while True:
                    fh.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


LAYOUTS = {"one process": (1, ()), "writer process": (1, ("--writer-process",)),
           "two workers": (2, ())}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_full_disk_under_a_sqlite_library(tmp_path: Path, founding: Founding,
                                            layout: str) -> None:
    """The SQLite library and the log key on a file system that fills up: admissions are 503
    ``DISK_FULL`` with ``Retry-After``, ``/healthz`` is not ready and says why,
    ``GET /api/log/checkpoint`` is a typed 503 (or the checkpoint it already recorded), the log
    has one line for the episode, not a traceback per request; once space is freed the
    library admits again by itself, and nothing acknowledged is lost."""
    with small_filesystem() as mount:
        genesis, log_key = write_library_files(founding, mount / "operator")
        db = mount / "library.db"
        workers, extra = LAYOUTS[layout]
        server = Server(genesis, db, log_key, workers=workers, extra=extra)
        writer = Writer(founding, server.url)
        client = httpx.Client(base_url=server.url, timeout=30)
        try:
            writer.admit_authorities()
            writer.publish(3)
            filler = fill(mount)
            # every HTTP worker sees the full disk, before any write of its own failed
            wait_for(lambda: all(client.get("/healthz").status_code == 503 for _ in range(6)),
                     10, "every worker not ready on a full disk")
            refused = None
            for _ in range(500):  # the log's free pages are used first
                r = client.post("/api/entries", content=next_envelope(writer))
                if r.status_code != 201:
                    refused = r
                    break
                writer.acknowledged.append(str(r.json()["id"]))
            assert refused is not None, "the full disk never refused an admission"
            assert_typed_503(refused, "DISK_FULL")
            for _ in range(5):
                assert_typed_503(client.post("/api/entries", content=next_envelope(writer)),
                                 "DISK_FULL")
            took, body = healthz_timed(client)
            assert_answers_at_once(took)
            assert body["status"] == 503 and body["ready"] is False, body
            assert any("DISK_FULL" in reason for reason in body["reasons"]), body
            checkpoint = client.get("/api/log/checkpoint")
            if checkpoint.status_code == 200:  # signed and recorded before the disk filled
                assert int(checkpoint.text.splitlines()[1]) == body["log_size"]
            else:
                assert_typed_503(checkpoint, "DISK_FULL")
            for rev in writer.acknowledged:  # reads go on
                assert client.get(f"/api/entries/{rev}").status_code == 200
            filler.unlink()
            wait_for(lambda: client.get("/healthz").status_code == 200, 30,
                     "healthz ready once space is freed")
            writer.publish(3)
            assert client.get("/api/log/checkpoint").status_code == 200
        finally:
            stderr = stopped(server, writer, client)
        assert "Traceback" not in stderr, stderr[-4000:]
        # one episode in each process that met it first hand (the writer process; a worker
        # whose checkpoint signing failed), never a line per request
        began, ended = episode_lines(stderr, "writes", "DISK_FULL")
        processes = workers + (1 if workers > 1 or extra else 0)
        assert 1 <= began <= processes and ended == began, stderr[-4000:]
        assert_all_kept(founding, db, writer.acknowledged, tmp_path)
        assert not list(mount.glob("operator/*.tmp*"))


# --- a stalled writer ---------------------------------------------------------------------------

def writer_process_of(server: Server) -> int:
    """The pid of the admission writer process of a live ``serve`` (the multiprocessing
    child; the HTTP workers are Granian's forks)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == server.proc.pid and b"spawn_main" in cmdline:
            return int(entry.name)
    raise AssertionError("no writer process")


def test_a_stalled_writer_meets_the_admission_deadline(tmp_path: Path, founding: Founding,
                                                       new_db: Any) -> None:
    """The admission writer process stopped (SIGSTOP) for longer than the admission deadline:
    the admission is 503 ``ADMISSION_TIMEOUT`` with ``Retry-After`` once the deadline passed,
    ``/healthz`` is not ready and says admissions are stalled; once the writer runs again
    (SIGCONT) the library is ready, and the same bytes sent again are answered 200 or 201: the
    outcome was unknown, the retry settles it, nothing is stored twice."""
    genesis, log_key = write_library_files(founding, tmp_path)
    db = new_db(tmp_path / "library.db")
    server = Server(genesis, db, log_key, workers=1,
                    extra=("--writer-process", "--admission-deadline", "2"))
    writer = Writer(founding, server.url)
    client = httpx.Client(base_url=server.url, timeout=30)
    pid = 0
    try:
        writer.admit_authorities()
        writer.publish(3)
        pid = writer_process_of(server)
        os.kill(pid, signal.SIGSTOP)
        envelope = next_envelope(writer)
        started = time.monotonic()
        r = client.post("/api/entries", content=envelope)
        waited = time.monotonic() - started
        assert_typed_503(r, "ADMISSION_TIMEOUT")
        assert 1.9 < waited < 6, waited
        assert "retry" in r.json()["error"].lower()
        took, body = healthz_timed(client)
        assert_answers_at_once(took)
        assert body["status"] == 503 and body["ready"] is False, body
        assert any("stalled" in reason for reason in body["reasons"]), body
        os.kill(pid, signal.SIGCONT)
        pid = 0
        wait_for(lambda: client.get("/healthz").status_code == 200, 30,
                 "healthz ready once the writer runs again")
        again = client.post("/api/entries", content=envelope)
        assert again.status_code in (200, 201), again.text
        writer.acknowledged.append(str(again.json()["id"]))
        writer.publish(2)
        assert client.get("/api/log/checkpoint").status_code == 200  # covers the whole log
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
        stderr = stopped(server, writer, client)
    assert stderr.count("admissions stalled") == 1, stderr[-4000:]
    assert stderr.count("admissions answered again") == 1, stderr[-4000:]
    assert_all_kept(founding, db, writer.acknowledged, tmp_path)


# --- operator commands beside a running server ----------------------------------------------------

def test_migrate_from_a_sqlite_library_a_server_admits_into(
    tmp_path: Path, founding: Founding, pg_cluster: pgcluster.Cluster
) -> None:
    """``migrate`` from a SQLite file while its server admits: refused, its message says to stop
    the server (``DATABASE_IN_USE``: the server holds the database's lock), and the PostgreSQL
    database holds nothing."""
    genesis, log_key = write_library_files(founding, tmp_path)
    db = tmp_path / "library.db"
    target = pg_cluster.database(migrated=False)
    server = Server(genesis, db, log_key, workers=1)
    writer = Writer(founding, server.url)
    stop = threading.Event()

    def admit() -> None:
        while not stop.is_set():
            writer.publish(1)

    pump = threading.Thread(target=admit)
    try:
        writer.admit_authorities()
        writer.publish(300)  # a copy long enough for admissions to land during it
        pump.start()
        out = cli("migrate", "--db", str(db), "--to", target, check=False)
    finally:
        stop.set()
        if pump.is_alive():
            pump.join()
        writer.close()
        server.stop()
    assert out.returncode != 0
    assert "DATABASE_IN_USE" in out.stderr and "stop" in out.stderr.lower(), out.stderr
    with open_readonly(target) as conn:  # refused before anything was created there
        assert conn.execute("SELECT to_regclass('log')").fetchone()[0] is None


def test_a_backup_is_one_file(tmp_path: Path, founding: Founding, new_db: Any) -> None:
    """A backup of a live library (either backend), described, exported and restored, leaves
    no ``-wal`` or ``-shm`` file beside it."""
    genesis, log_key = write_library_files(founding, tmp_path)
    db = new_db(tmp_path / "library.db")
    backups = tmp_path / "backups"
    backups.mkdir()
    server = Server(genesis, db, log_key, workers=1)
    writer = Writer(founding, server.url)
    try:
        writer.admit_authorities()
        writer.publish(5)
        cli("backup", "--db", str(db), str(backups / "backup.db"))
    finally:
        writer.close()
        server.stop()
    cli("export", "--db", str(backups / "backup.db"), "-o", str(tmp_path / "export.jsonl"))
    assert sorted(p.name for p in backups.iterdir()) == ["backup.db"]
    restored = tmp_path / "restored"
    restored.mkdir()
    cli("restore", str(backups / "backup.db"), "--db", str(restored / "library.db"))
    # beside it only the lock file every user of the database takes (store/db_lock.py)
    assert sorted(p.name for p in restored.iterdir()) == ["library.db", "library.db.lock"]
    assert sorted(p.name for p in backups.iterdir()) == ["backup.db"]


async def test_the_checkpoint_route_when_the_published_checkpoint_cannot_be_written(
    tmp_path: Path, founding: Founding, clock: Clock
) -> None:
    """``LOG_KEY.published`` on a full file system: ``GET /api/log/checkpoint`` is 503
    ``DISK_FULL`` with ``Retry-After`` (a checkpoint is served only once it is recorded there),
    not a 500; once space is freed the same checkpoint is recorded and served."""
    with small_filesystem("1m") as mount:
        async for api in serve_library(tmp_path, founding, clock):
            published = PublishedCheckpoint(mount / "log.key.published")
            api.library.published = published
            await api.publish("owner", space())
            filler = fill(mount)
            r = await api.client.get("/api/log/checkpoint")
            assert r.status_code == 503, r.text
            assert r.json()["code"] == "DISK_FULL" and int(r.headers["Retry-After"]) > 0
            assert published.load() is None
            filler.unlink()
            r = await api.client.get("/api/log/checkpoint")
            assert r.status_code == 200, r.text
            stored = published.load()
            assert stored is not None and stored.size == int(r.text.splitlines()[1])
