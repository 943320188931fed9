"""The fixtures pytest discovers: the seeded founding and clock, the storage backends every
``db`` test runs on, and the real app over a fresh database (``api``).  What the fixtures are
built from is in ``tests/support/``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from alexandria.service.bootstrap import Founding, found_library
from alexandria.service.published import PublishedCheckpoint, path_for
from tests.support import pgcluster
from tests.support.library import BACKENDS, SEED, T0, Api, Clock, serve_library


@pytest.fixture
def founding() -> Founding:
    f = found_library(seed=SEED, created_at=T0)
    f.enroll("owner")
    f.enroll("peer")
    return f


@pytest.fixture
def clock() -> Clock:
    return Clock()


# --- storage backends ----------------------------------------------------------------------------
# Every test that takes ``db`` (hence ``api``) runs once on SQLite and once on PostgreSQL, the
# latter in a database of its own in one throwaway cluster per test session
# (tests/support/pgcluster.py).
# A test of something only a SQLite file has (its -wal file, a raw sqlite3 connection) is marked
# ``sqlite_only``.

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
    """``new_db`` for a module's shared live library (``tests.support.cli.Library``): every test of
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
    published = PublishedCheckpoint(path_for(tmp_path / "log.key"))
    async for a in serve_library(tmp_path, founding, clock, db=db, published=published):
        yield a
