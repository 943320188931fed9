"""``alexandria serve``: run a library over HTTP (PROTOCOL §8).

With ``--genesis`` and ``--db`` it serves that library.  With no arguments it uses an embedded
default in ``./alexandria-data/``, created on first run (genesis, root, authority and log keys,
their certificates admitted) and reused afterwards.  The processes that serve it, and how they
start and stop, are ``service/supervisor.py``'s; each HTTP worker builds its app here
(``app_for``) from the one ``ServeConfig`` they all receive.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from alexandria.api.origin import Origin, listen_url
from alexandria.core.timestamps import now
from alexandria.errors import Malformed
from alexandria.files import private_dir, write_json
from alexandria.service import front_end as front
from alexandria.service import supervisor
from alexandria.service.bootstrap import Founding, found_library
from alexandria.service.cosigning import Cosigning, WitnessEndpoint
from alexandria.service.front_end import HEAD_BUFFER_BYTES as HEAD_BUFFER_BYTES
from alexandria.service.front_end import HEAD_TIMEOUT_MS as HEAD_TIMEOUT_MS
from alexandria.service.library import Library
from alexandria.service.operator_dir import OperatorDir
from alexandria.service.supervisor import ServeConfig as ServeConfig
from alexandria.service.writer_service import WriterClient
from alexandria.store.sqlite import sqlite_storage

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
        storage = sqlite_storage(data.db, founding.genesis)
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

def configure_witnesses(library: Library, options: list[str] | tuple[str, ...],
                        quorum: int) -> None:
    """``--witness NAME=URL+VKEY`` options and ``--witness-quorum``: the witnesses ``library``
    sends its checkpoints to."""
    from alexandria.core.witness_policy import WitnessPolicy, parse_witness_endpoint

    endpoints = [WitnessEndpoint(*parse_witness_endpoint(o)) for o in options]
    WitnessPolicy(tuple(e.verifier for e in endpoints), quorum)  # checks the quorum
    if len({e.verifier.vkey for e in endpoints}) != len(endpoints):
        raise Malformed("the same witness key is given twice", "USAGE")
    library.cosigning = Cosigning(endpoints, quorum)
    library.checkpoints.listeners[:] = [library.cosigning.signed]


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
    the fastest layout (bench/results/journal.md, "Admission throughput")."""
    cores = usable_cores() if cores is None else cores
    return 1 if cores <= 1 else min(cores, MAX_AUTO_WORKERS)


def run(config: ServeConfig, front_end: str = "granian",
        watcher: supervisor.Supervisor | None = None) -> None:
    """Serve until stopped (``service/supervisor.py``): N HTTP worker processes, sharing one
    admission writer process with several workers or ``config.dedicated_writer``."""
    supervisor.serve(config, front.runner(front_end), watcher)


def app_for(config: ServeConfig) -> object:
    """The app of one HTTP worker process (``ServeConfig.app``)."""
    # imported in the worker: the app's modules load prometheus-client, which must first see
    # the multiprocess directory the main process sets up, and the main process stays light
    # until its signal handlers are in place
    from alexandria.api.app import create_app
    from alexandria.api.guard import refusal_budgets

    library = Library.from_files(config.genesis, config.db, config.log_key, config.read_db)
    if config.witnesses:
        configure_witnesses(library, config.witnesses, config.witness_quorum)
    if config.writer_socket:
        library.writer = WriterClient(config.writer_socket)
    if config.admission_deadline_s is not None:
        library.admission_deadline_s = config.admission_deadline_s
    origin = Origin(config.public_url, config.trust_proxy_headers,
                    listen_url(config.host, config.port))
    return create_app(library, origin=origin, server_timing=config.server_timing,
                      query_timeout_s=config.query_timeout_s,
                      refusals=refusal_budgets(config.refusal_burst))
