from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from alexandria.api.app import create_app
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.service.bootstrap import Founding, found_library
from alexandria.service.library import Library
from alexandria.store.backends import storage_for
from tests import pgcluster

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = json.loads((ROOT / "contracts" / "alexandria-contract.json").read_text())
SEED = b"alexandria-test-seed"
T0 = "2026-01-01T00:00:00.000Z"


class Clock:
    """A controllable server clock (milliseconds)."""

    def __init__(self, start: str = "2026-06-01T00:00:00.000Z") -> None:
        ms = parse_ms(start)
        assert ms is not None
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    def tick(self, ms: int = 1000) -> str:
        self.ms += ms
        return format_ms(self.ms)

    def now(self) -> str:
        return format_ms(self.ms)


@pytest.fixture
def founding() -> Founding:
    f = found_library(seed=SEED, created_at=T0)
    f.enroll("owner")
    f.enroll("peer")
    return f


@pytest.fixture
def clock() -> Clock:
    return Clock()


class Api:
    """A black-box client of the real app, with helpers to publish as participants."""

    def __init__(
        self, client: httpx.AsyncClient, founding: Founding, clock: Clock, library: Library
    ) -> None:
        self.client = client
        self.founding = founding
        self.clock = clock
        self.library = library

    def envelope(
        self, who: str, content: dict[str, Any], authored_at: str | None = None
    ) -> dict[str, Any]:
        p = self.founding.participants[who]
        return p.envelope(self.founding.genesis, content, authored_at or self.clock.tick())

    async def post(self, envelope: Any, **params: str) -> httpx.Response:
        data = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
        return await self.client.post("/api/entries", content=data, params=params)

    async def publish(self, who: str, content: dict[str, Any], expect: int = 201) -> dict[str, Any]:
        r = await self.post(self.envelope(who, content))
        assert r.status_code == expect, r.text
        out: dict[str, Any] = r.json()
        return out


async def serve_library(
    tmp_path: Path, founding: Founding, clock: Clock,
    documents: list[dict[str, Any]] | None = None, db: str | Path | None = None,
) -> AsyncIterator[Api]:
    """The real app over a fresh database (``db``: a PostgreSQL URL, or by default
    ``tmp_path/lib.db``), its authority documents admitted (by default the founding's own)."""
    storage = storage_for(db or tmp_path / "lib.db", founding.genesis)
    storage.clock = clock
    library = Library(founding.genesis, storage, founding.log_key)
    app = create_app(library)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as client,
    ):
        for doc in founding.authority_documents() if documents is None else documents:
            r = await client.post("/api/authority", json=doc)
            assert r.status_code == 201, r.text
        yield Api(client, founding, clock, library)


# --- storage backends ----------------------------------------------------------------------------
# Every test that takes ``db`` (hence ``api``) runs once on SQLite and once on PostgreSQL, the
# latter in a database of its own in one throwaway cluster per test session (tests/pgcluster.py).
# A test of something only a SQLite file has (its -wal file, a raw sqlite3 connection) is marked
# ``sqlite_only``.

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pgcluster.Cluster]:
    if pgcluster.binaries() is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql;"
                    " .ci/run installs it)")
    with pgcluster.cluster() as cluster:
        yield cluster


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    marker = request.node.get_closest_marker("sqlite_only")
    if request.param == "postgresql" and marker is not None:
        pytest.skip(marker.args[0] if marker.args else "tests what only SQLite has")
    return str(request.param)


@pytest.fixture
def db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str | Path]:
    """A fresh library database of the test's backend: a SQLite file or a PostgreSQL URL
    (dropped after the test)."""
    if backend == "sqlite":
        yield tmp_path / "lib.db"
        return
    cluster: pgcluster.Cluster = request.getfixturevalue("pg_cluster")
    url = cluster.database()
    yield url
    cluster.drop(url)


def _databases(backend: str, request: pytest.FixtureRequest
               ) -> Iterator[Callable[[Path], str | Path]]:
    if backend == "sqlite":
        yield lambda path: path
        return
    cluster: pgcluster.Cluster = request.getfixturevalue("pg_cluster")
    made: list[str] = []

    def new(path: Path) -> str:
        made.append(cluster.database())
        return made[-1]

    yield new
    for url in made:
        cluster.drop(url)


@pytest.fixture
def new_db(backend: str, request: pytest.FixtureRequest) -> Iterator[Callable[[Path], str | Path]]:
    """Fresh library databases of the test's backend for live servers and commands:
    ``new_db(path)`` is the SQLite file ``path`` itself, or the URL of a new database of the
    session's PostgreSQL cluster (dropped after the test)."""
    yield from _databases(backend, request)


@pytest.fixture(scope="module", params=BACKENDS)
def module_db(request: pytest.FixtureRequest) -> Iterator[Callable[[Path], str | Path]]:
    """``new_db`` for a module's shared live library (``cli_support.Library``): every test of
    the module runs against a library on each backend."""
    yield from _databases(str(request.param), request)


@pytest.fixture
async def api(
    tmp_path: Path, founding: Founding, clock: Clock, db: str | Path
) -> AsyncIterator[Api]:
    async for a in serve_library(tmp_path, founding, clock, db=db):
        yield a

@pytest.fixture
async def guarded(tmp_path: Path, founding: Founding, clock: Clock, db: Path | str
                  ) -> AsyncIterator[Api]:
    """The app of a library whose log key keeps its published checkpoint
    (``LOG_KEY.published``), its authorities admitted."""
    from alexandria.service.published import PublishedCheckpoint, path_for

    storage = storage_for(db, founding.genesis)
    storage.clock = clock
    published = PublishedCheckpoint(path_for(tmp_path / "log.key"))
    library = Library(founding.genesis, storage, founding.log_key, published=published)
    app = create_app(library)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                          base_url="http://testserver") as client,
    ):
        for doc in founding.authority_documents():
            assert (await client.post("/api/authority", json=doc)).status_code == 201
        yield Api(client, founding, clock, library)
