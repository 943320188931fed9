"""``alexandria serve``: run a library over HTTP (PROTOCOL §8).

With ``--genesis`` and ``--db`` it serves that library.  With no arguments it uses an embedded
default in ``./alexandria-data/``, created on first run (genesis, root, authority and log keys,
their certificates admitted) and reused afterwards.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from alexandria.bootstrap import Founding, found_library
from alexandria.config import write_json
from alexandria.library import Library
from alexandria.operator_dir import OperatorDir
from alexandria.sqlite_store import SqliteStorage
from alexandria.timestamps import now

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
    data.root.mkdir(parents=True, exist_ok=True)
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






_ENV = ("ALEXANDRIA_GENESIS", "ALEXANDRIA_DB", "ALEXANDRIA_LOG_KEY")


def run(library: Library, host: str, port: int, workers: int = 1,
        files: tuple[str, str, str | None] | None = None) -> None:
    """Serve ``library``.  With several workers, each process opens the same database; the
    write transactions serialise them (``files`` names the genesis, database and log key)."""
    import uvicorn

    from alexandria.app import create_app

    if workers > 1 and files is not None:
        for name, value in zip(_ENV, files, strict=True):
            if value:
                os.environ[name] = str(value)
        uvicorn.run(
            "alexandria.serve:app_from_env", factory=True, workers=workers, host=host, port=port,
            log_level="warning", server_header=False, date_header=False,
        )
    else:
        uvicorn.run(
            create_app(library), host=host, port=port, log_level="warning", server_header=False,
            date_header=False,
        )


def app_from_env() -> object:
    """The app of one worker process of a multi-process server."""
    from alexandria.app import create_app

    genesis, db, log_key = (os.environ.get(name) for name in _ENV)
    assert genesis and db
    return create_app(Library.from_files(genesis, db, log_key))
