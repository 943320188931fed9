"""``alexandria serve``: run a library over HTTP (PROTOCOL §8).

With ``--genesis`` and ``--db`` it serves that library.  With no arguments it uses an embedded
default in ``./alexandria-data/``, created on first run (genesis, root, authority and log keys,
their certificates admitted) and reused afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alexandria.api.origin import ENV_PUBLIC_URL, ENV_TRUST_PROXY, Origin
from alexandria.core.timestamps import now
from alexandria.errors import BadRequest
from alexandria.files import private_dir, write_json
from alexandria.service.bootstrap import Founding, found_library
from alexandria.service.cosigning import Cosigning, WitnessEndpoint
from alexandria.service.library import Library, load_genesis
from alexandria.service.operator_dir import OperatorDir
from alexandria.service.writer_service import WriterClient, WriterServer
from alexandria.store.sqlite import SqliteStorage

DEFAULT_DIR = Path("alexandria-data")


@dataclass(frozen=True)
class DataDir(OperatorDir):
    """The embedded default: an operator directory (same file names, so the operator commands
    work on it as they are) plus the database the server keeps there."""

    @property
    def db(self) -> Path:
        return self.root / "library.db"

    @property
    def log_key(self) -> Path:
        return self.root / "log.key"

    @property
    def authority_key(self) -> Path:
        return self.root / "authority.key"

    @property
    def root_key(self) -> Path:
        return self.root / "root.key"

    def certificate(self, name: str) -> Path:
        return self.certificate_path(self.root / f"{name}.key")


def create_data_dir(data: DataDir, library: str = "alexandria-local",
                    origin: str = "127.0.0.1/alexandria/log") -> Founding:
    """A fresh library: keys, genesis, both authority certificates, admitted."""
    private_dir(data.root)
    founding = found_library(library=library, origin=origin, created_at=now())
    founding.roots[0].save(data.root_key)
    founding.authority.save(data.authority_key)
    founding.log_key.save(data.log_key)
    write_json(data.certificate("authority"), founding.authority_certificate)
    write_json(data.certificate("log"), founding.log_certificate)

    async def admit() -> None:
        storage = SqliteStorage(data.db, founding.genesis)
        await storage.open()
        try:
            for doc in founding.authority_documents():
                await storage.admit_authority(doc)
        finally:
            await storage.close()

    asyncio.run(admit())
    write_json(data.genesis_path, founding.genesis_document)  # last: its presence marks completion
    return founding


def default_library(data: DataDir) -> tuple[Library, bool]:
    """The embedded default library, created when absent; True when it was just created."""
    created = False
    if not data.genesis_path.exists():
        create_data_dir(data)
        created = True
    return Library.from_files(data.genesis_path, data.db, data.log_key), created






def configure_witnesses(library: Library, options: list[str], quorum: int) -> None:
    """``--witness NAME=URL+VKEY`` options and ``--witness-quorum``: the witnesses ``library``
    sends its checkpoints to (also in the environment, for the worker processes)."""
    from alexandria.core.witness_policy import WitnessPolicy, parse_witness_endpoint

    endpoints = [WitnessEndpoint(*parse_witness_endpoint(o)) for o in options]
    WitnessPolicy(tuple(e.verifier for e in endpoints), quorum)  # checks the quorum
    if len({e.verifier.vkey for e in endpoints}) != len(endpoints):
        raise BadRequest("the same witness key is given twice", "USAGE")
    library.cosigning = Cosigning(endpoints, quorum)
    library.checkpoints.listeners[:] = [library.cosigning.signed]
    os.environ[_WITNESS_ENV] = "\n".join(options)
    os.environ[_QUORUM_ENV] = str(quorum)


_WITNESS_ENV = "ALEXANDRIA_WITNESSES"
_QUORUM_ENV = "ALEXANDRIA_WITNESS_QUORUM"
_ENV = ("ALEXANDRIA_GENESIS", "ALEXANDRIA_DB", "ALEXANDRIA_LOG_KEY")
_WRITER_ENV = "ALEXANDRIA_WRITER"
READ_DB_ENV = "ALEXANDRIA_READ_DB"
# prometheus-client's multiprocess directory (api/metrics.MULTIPROC_ENV), named here without
# importing api/metrics: prometheus-client picks its value store when first imported, and
# Granian forks its workers from this process, so it must not be loaded here before it is set
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
WRITER_SWITCH_INTERVAL = 0.0003  # seconds, in the writer process only

# What a stranger's connection may cost the public server (docs/deployment.md).  Granian's
# HTTP/1 reads a request head into a buffer of at most HEAD_BUFFER_BYTES (a bigger head is
# answered 431 and closed) and closes a connection whose head has not arrived HEAD_TIMEOUT_MS
# after it opened or after its previous answer: a silent, a trickling or an idle keep-alive
# connection.  A body has ``http.BODY_TIMEOUT_S`` to arrive.  Each worker serves at most
# MAX_CONNECTIONS connections at once (Granian's "backpressure" counts connections, not
# requests); the kernel queues up to BACKLOG more, which wait for a slot: a flood of silent
# connections beyond the limit delays newcomers by at most HEAD_TIMEOUT_MS.  The soft limit on
# open files is raised to FILE_LIMIT so the connections, not the descriptors, run out first.
HEAD_BUFFER_BYTES = 65_536
HEAD_TIMEOUT_MS = 10_000
MAX_CONNECTIONS = 2048
BACKLOG = 2048
FILE_LIMIT = 8192
FRONT_ENDS = ("granian", "uvicorn")
# uvicorn remains selectable (``serve --front-end uvicorn``) so bench/ can compare the two; it
# bounds neither head size (httptools) nor head time: not for a public server
_UVICORN: dict[str, Any] = {"log_level": "warning", "server_header": False, "date_header": False,
            "access_log": False, "proxy_headers": False}


MAX_AUTO_WORKERS = 8


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def auto_workers(cores: int | None = None) -> int:
    """``serve``'s default: one HTTP process on one core; with more, one HTTP process per core
    (up to ``MAX_AUTO_WORKERS``) beside the admission writer process — on two cores that is
    the fastest layout measured (docs/admission.md, ``--workers 2``)."""
    cores = usable_cores() if cores is None else cores
    return 1 if cores <= 1 else min(cores, MAX_AUTO_WORKERS)


@contextlib.contextmanager
def metrics_directory() -> Iterator[str]:
    """prometheus-client's multiprocess mode for the HTTP workers (``api/metrics.py``): a
    fresh private directory, named in the environment the workers inherit, removed at exit."""
    directory = tempfile.mkdtemp(prefix="alexandria-metrics-")
    os.environ[_MULTIPROC_ENV] = directory
    try:
        yield directory
    finally:
        os.environ.pop(_MULTIPROC_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


def run(library: Library, host: str, port: int, workers: int = 1,
        files: tuple[str, str, str | None] | None = None, dedicated_writer: bool = False,
        front_end: str = "granian", origin: Origin | None = None,
        access_log: bool = False) -> None:
    """Serve ``library``.  With several workers or ``dedicated_writer`` (``files`` names the
    genesis, database and log key), N HTTP processes share one admission writer process
    (``writer_service``), on either backend.  Granian
    builds each worker's app from ``files`` (``app_from_env``), so ``library`` itself serves
    only under uvicorn with one process.  ``access_log``: one line per request, on stdout."""
    origin = origin or Origin()
    if origin.public:
        os.environ[ENV_PUBLIC_URL] = origin.public
    if origin.trust_proxy_headers:
        os.environ[ENV_TRUST_PROXY] = "1"
    if files is not None:
        for name, value in zip(_ENV, files, strict=True):
            if value:
                os.environ[name] = str(value)
    shared = (workers > 1 or dedicated_writer) and files is not None
    options = {**_UVICORN, "access_log": access_log}
    if access_log:
        options["log_level"] = "info"
    with contextlib.ExitStack() as stack:
        if shared and files is not None:
            # on PostgreSQL too: every worker could admit directly (the row lock of
            # ``ledger_writes`` serialises writers), but one writer commits larger groups and
            # hands the lock over less often (bench.admission --workers 2 --postgresql at load
            # 10: 131-155 admissions/s direct, 172-204 through the writer; docs/deployment.md)
            os.environ[_WRITER_ENV] = stack.enter_context(writer_process(files[0], files[1]))
            stack.enter_context(metrics_directory())  # every worker's counters, summed
        if front_end == "granian" and files is not None:
            _run_granian(host, port, workers, access_log)
            return
        import uvicorn

        if shared:
            uvicorn.run("alexandria.api.serve:app_from_env", factory=True, workers=workers,
                        host=host, port=port, **options)
        else:
            from alexandria.api.app import create_app

            uvicorn.run(create_app(library, origin=origin), host=host, port=port, **options)


def _run_granian(host: str, port: int, workers: int, access_log: bool = False) -> None:
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server import Server

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FILE_LIMIT if hard == resource.RLIM_INFINITY else min(FILE_LIMIT, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    Server(
        "alexandria.api.serve:app_from_env", factory=True, address=host, port=port,
        interface=Interfaces.ASGI, workers=workers, http=HTTPModes.http1, websockets=False,
        loop=Loops.auto, backlog=BACKLOG, backpressure=MAX_CONNECTIONS,
        http1_settings=HTTP1Settings(header_read_timeout=HEAD_TIMEOUT_MS,
                                     max_buffer_size=HEAD_BUFFER_BYTES),
        log_level=LogLevels.warning, log_access=access_log,
    ).serve()


def app_from_env() -> object:
    """The app of one worker process of a multi-process server."""
    from alexandria.api.app import create_app

    genesis, db, log_key = (os.environ.get(name) for name in _ENV)
    assert genesis and db
    library = Library.from_files(genesis, db, log_key, os.environ.get(READ_DB_ENV) or None)
    witnesses = os.environ.get(_WITNESS_ENV)
    if witnesses:
        configure_witnesses(library, witnesses.split("\n"), int(os.environ[_QUORUM_ENV]))
    writer = os.environ.get(_WRITER_ENV)
    if writer:
        library.writer = WriterClient(writer)
    origin = Origin(os.environ.get(ENV_PUBLIC_URL) or None, bool(os.environ.get(ENV_TRUST_PROXY)))
    return create_app(library, origin=origin)


@contextlib.contextmanager
def writer_process(genesis: str, db: str) -> Iterator[str]:
    """Run the admission writer process for as long as the block runs; yields its socket.

    A server whose writer died would answer every admission 503 while looking healthy, so if
    the writer exits on its own the whole server is stopped (SIGTERM to this process) and says
    why: whatever supervises it can restart it."""
    directory = tempfile.mkdtemp(prefix="alexandria-writer-")  # mode 0700: ours only
    socket_path = os.path.join(directory, "writer.sock")
    process = multiprocessing.get_context("spawn").Process(
        target=writer_main, args=(genesis, db, socket_path), name="alexandria-writer"
    )
    process.start()
    stopping = threading.Event()

    def watch() -> None:
        process.join()
        if not stopping.is_set():
            print(f"the admission writer process exited ({process.exitcode}): stopping the"
                  " server", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="writer-watch", daemon=True).start()
    try:
        _await_writer(process, socket_path)
        yield socket_path
    finally:
        stopping.set()
        process.terminate()
        process.join(30)
        shutil.rmtree(directory, ignore_errors=True)


def _await_writer(process: multiprocessing.process.BaseProcess, socket_path: str) -> None:
    """Wait until the writer listens: it opens the library first, and opening may migrate an
    earlier layout (``store/schema.py``, ``store/feed.py``: minutes on a large library, in one
    write transaction).  The HTTP workers start only then — opened while a migration holds
    the write lock, they would time out on it and fail to start."""
    started = time.monotonic()
    said = False
    while process.is_alive():
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.connect(socket_path)
            return
        if not said and time.monotonic() - started > 2.0:
            print("opening the library (an earlier layout is migrated first: on a large"
                  " library this takes minutes)…", file=sys.stderr, flush=True)
            said = True
        time.sleep(0.05)
    # the watch thread reports the exit and stops the server


def writer_main(genesis: str, db: str, socket_path: str) -> None:
    """The writer process: admissions from the workers, until SIGTERM or its parent is gone."""

    # Ctrl-C reaches the whole process group: the writer stays until the workers have
    # drained their requests and the parent sends SIGTERM
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the writer thread lets go of the GIL at every SQLite call; with the default 5 ms switch
    # interval the event loop, once it has it, keeps it for a whole burst of requests while
    # the writer waits (bench.admission --workers 2, 10 interleaved pairs: 8 better, +9% on
    # average)
    sys.setswitchinterval(WRITER_SWITCH_INTERVAL)

    async def main() -> None:
        from alexandria.store.backends import storage_for

        storage = storage_for(db, load_genesis(genesis))
        await storage.open()
        server = WriterServer(storage.submit, socket_path, storage.submit_many)
        await server.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        parent = os.getppid()
        try:
            while not stop.is_set() and os.getppid() == parent:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
        finally:
            await server.close()
            await storage.close()

    try:
        import uvloop
    except ImportError:  # uvicorn[standard] brings it where it builds
        asyncio.run(main())
    else:
        uvloop.run(main())
