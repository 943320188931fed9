"""A throwaway PostgreSQL cluster for the tests and benchmarks: ``initdb`` into a temporary
directory, the server on a Unix socket in that directory (no TCP port), stopped and removed at
the end.  Root cannot run the server, so as root the cluster belongs to the ``postgres`` user.

``Cluster.database()`` creates a fresh library database and returns its libpq URL: a copy of a
template database migrated once per cluster (``CREATE DATABASE … TEMPLATE``: ~35 ms, where an
empty database then migrated by the first node takes ~190 ms; several hundred tests make one),
or with ``migrated=False`` an empty one, as an operator's ``createdb`` leaves it.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg

#: fast and throwaway: a crash loses the cluster, which nobody keeps
TEST_SETTINGS = ("-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=300",
                 "-c", "listen_addresses=")


def binaries() -> Path | None:
    """The directory of Debian's PostgreSQL server programs (the newest), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Cluster:
    def __init__(self, root: Path, bin_dir: Path, durable: bool = False) -> None:
        self.root = root
        self.bin = bin_dir
        self.data = root / "data"
        self.socket = str(root)
        self.durable = durable
        self._names = itertools.count(1)
        self._template: str | None = None
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self._user = pwd.getpwnam("postgres")
            os.chown(root, self._user.pw_uid, self._user.pw_gid)

    def _run(self, *args: str) -> None:
        def demote() -> None:
            if self._user is not None:
                os.setgid(self._user.pw_gid)
                os.setuid(self._user.pw_uid)

        subprocess.run(args, check=True, preexec_fn=demote, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, cwd=self.root)

    def start(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                  "postgres", "-E", "UTF8", "--locale=C.UTF-8")
        options = ["-k", self.socket]
        options += [] if self.durable else list(TEST_SETTINGS)
        if self.durable:
            options += ["-c", "listen_addresses=", "-c", "max_connections=300"]
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l",
                  str(self.root / "server.log"), "-o", " ".join(options), "start")

    def resume(self) -> None:
        """Start the stopped server again (its data kept)."""
        options = ["-k", self.socket, *TEST_SETTINGS]
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l",
                  str(self.root / "server.log"), "-o", " ".join(options), "start")

    def stop(self, mode: str = "immediate") -> None:
        """``immediate`` (the end of a session: nothing kept) or ``fast`` (a clean shutdown:
        every commit on disk even with the test settings' asynchronous commits)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode,
                      "-w", "stop")

    def url(self, name: str = "postgres") -> str:
        return f"postgresql://postgres@/{name}?host={self.socket}"

    @property
    def postmaster(self) -> int:
        """The running server's process id (its processes are its children: the benchmarks
        count their CPU)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def database(self, prefix: str = "t", migrated: bool = True) -> str:
        name = f"{prefix}{os.getpid()}_{next(self._names)}"
        template = self._migrated_template() if migrated else "template0"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop a database ``database()`` made (its connections ended): the session's cluster
        keeps only what tests still use."""
        name = url.split("@/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.url(), autocommit=True) as conn, \
                contextlib.suppress(psycopg.errors.QueryCanceled):
            # bounded: a database something still holds is left for the cluster's removal
            conn.execute("SET statement_timeout = '10s'")
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _migrated_template(self) -> str:
        """A database with the current schema and nothing else (no genesis: each copy becomes
        whichever library a node opens it for); no connection stays open on it, as
        ``CREATE DATABASE … TEMPLATE`` requires."""
        if self._template is None:
            from alexandria.store.postgresql import connection, schema

            name = f"template{os.getpid()}"
            with psycopg.connect(self.url(), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
            with connection.connect(self.url(name)) as raw:
                schema.apply(raw)
            self._template = name
        return self._template


@contextlib.contextmanager
def standby(primary: Cluster) -> Iterator[Cluster]:
    """A streaming replica of ``primary`` (``pg_basebackup -R``: its data copied, then the WAL
    streamed), a hot standby on a socket directory of its own."""
    root = Path(tempfile.mkdtemp(prefix="alexandria-pg-standby-"))
    replica = Cluster(root, primary.bin)
    try:
        replica._run(str(primary.bin / "pg_basebackup"), "-D", str(replica.data), "-R",
                     "-h", primary.socket, "-U", "postgres", "-X", "stream", "-c", "fast")
        replica.resume()
        yield replica
    finally:
        replica.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def cluster(durable: bool = False) -> Iterator[Cluster]:
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL's server programs are not installed"
                           " (Debian: apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="alexandria-pg-"))
    c = Cluster(root, bin_dir, durable)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
