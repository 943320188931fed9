"""Checkpoints across server restarts: sizes only grow, every pair is consistent, and the log
refuses to sign over leaves or nodes that disagree with what it signed before."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from alexandria.api.app import create_app
from alexandria.core import merkle
from alexandria.core.checkpoint import verify_checkpoint
from alexandria.reads import log
from alexandria.service import checkpoint_signer
from alexandria.service.bootstrap import Founding
from alexandria.service.checkpoint_signer import sign_checkpoint_now
from alexandria.service.library import Library
from alexandria.service.published import PublishedCheckpoint
from alexandria.store.backends import storage_for
from tests.support.library import Api, Clock
from tests.support.log import discussion


@asynccontextmanager
async def server(db: Path | str, founding: Founding, clock: Clock,
                 authorities: bool = True,
                 published: PublishedCheckpoint | None = None) -> AsyncIterator[Api]:
    """One run of the app on ``db``: a fresh process as far as the log is concerned
    (``authorities``: its authority documents are posted, retries after the first run;
    ``published``: the log key's record of the largest checkpoint it published)."""
    storage = storage_for(db, founding.genesis)
    storage.clock = clock
    library = Library(founding.genesis, storage, founding.log_key, published=published)
    app = create_app(library)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for doc in founding.authority_documents() if authorities else ():
                r = await client.post("/api/authority", json=doc)
                assert r.status_code in (200, 201), r.text
            yield Api(client, founding, clock, library)


async def signed(api: Api) -> tuple[int, bytes]:
    r = await api.client.get("/api/log/checkpoint")
    assert r.status_code == 200, r.text
    f = api.founding
    cp = verify_checkpoint(r.text, f.genesis.origin, f.log_key.public_hex)
    return cp.size, cp.root


async def test_across_restarts_sizes_only_grow_and_every_pair_is_consistent(
    founding: Founding, clock: Clock, db: Path | str
) -> None:
    seen: list[tuple[int, bytes]] = []
    n = 0
    for run in range(4):
        async with server(db, founding, clock) as api:
            if seen:  # right after a restart the latest checkpoint is still the latest
                assert await signed(api) == seen[-1]
            for _ in range(2 + run):
                for _ in range(run + 1):
                    await api.publish("owner", discussion(n))
                    n += 1
                seen.append(await signed(api))
    assert [s for s, _ in seen] == sorted({s for s, _ in seen}), "strictly growing sizes"
    async with server(db, founding, clock) as api:
        r = await api.client.get("/api/log/checkpoints")
        listed = [verify_checkpoint(c["note"], founding.genesis.origin,
                                    founding.log_key.public_hex) for c in r.json()["checkpoints"]]
        assert [(c.size, c.root) for c in listed] == seen
        for i, (old, old_root) in enumerate(seen):
            for new, new_root in seen[i:]:
                r = await api.client.get("/api/log/proof/consistency",
                                         params={"old": old, "new": new})
                proof = [bytes.fromhex(h) for h in r.json()["proof"]]
                merkle.verify_consistency(old, new, old_root, new_root, proof)


def tamper(db: Path | str, sql: str) -> None:
    """Change the stored log behind the server's back (PostgreSQL: the same statement, its
    ``zeroblob`` spelt as a ``bytea``)."""
    if isinstance(db, str):
        with psycopg.connect(db, autocommit=True) as pg:
            pg.execute(sql.replace("zeroblob(32)", "decode(repeat('00', 32), 'hex')").encode())
        return
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql)
    conn.close()


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        # a stored node inside the signed tree no longer matches the signed root
        # the perfect node (level 2, index 0), at in-order position 3: the tree is not the
        # one published, and takes no admission either
        ("UPDATE merkle_nodes SET hash = zeroblob(32) WHERE position = 3", "LOG_FORKED"),
        # leaves the last checkpoint covered are gone: sizes would shrink
        ("DELETE FROM log WHERE sequence >= 5", "LOG_TRUNCATED"),
    ],
)
async def test_the_log_never_signs_a_tree_inconsistent_with_its_last_checkpoint(
    founding: Founding, clock: Clock, sql: str, code: str, db: Path | str
) -> None:
    async with server(db, founding, clock) as api:
        for i in range(4):
            await api.publish("owner", discussion(i))
        assert (await signed(api))[0] == 6
    tamper(db, sql)
    async with server(db, founding, clock, authorities=False) as api:
        r = await api.post(api.envelope("owner", discussion(99)))
        assert r.status_code == 503, r.text
        assert r.json()["code"] in (code, "CATCH_UP_REQUIRED"), r.text
        r = await api.client.get("/api/log/checkpoint")
        assert r.status_code == 503, r.text
        assert r.json()["code"] == code
        r = await api.client.get("/api/log/checkpoints")
        assert [c["size"] for c in r.json()["checkpoints"]] == [6], "nothing new was signed"


async def test_a_checkpoint_is_persisted_atomically_with_what_it_signs(
    founding: Founding, clock: Clock, db: Path | str
) -> None:
    """The checkpoint row is written inside the write transaction that reads the tree: a
    failing transaction (here: the key check) leaves no row behind."""
    async with server(db, founding, clock) as api:
        await api.publish("owner", discussion(0))
        storage = api.library.storage

        def sign_then_fail(conn: sqlite3.Connection) -> None:
            sign_checkpoint_now(conn, storage, founding.log_key)
            raise RuntimeError("crash after signing, before commit")

        with pytest.raises(RuntimeError):
            await storage.write(sign_then_fail)
        rows = await storage.read(lambda conn: log.checkpoints_after(conn, 0))
        assert rows == []
        assert (await signed(api))[0] == 3


async def test_signing_a_checkpoint_keeps_what_the_admitting_writer_remembers(
    founding: Founding, clock: Clock, db: Path | str, backend: str
) -> None:
    """A checkpoint writes nothing a writer remembers: the writer that signs it keeps its
    memory, and on PostgreSQL so does another node's writer (its lock leaves
    ``ledger_writes.version`` as it is); any other write of that node makes it forget.  On
    SQLite another connection's commit always moves ``data_version``."""
    async with server(db, founding, clock) as api:
        await api.publish("owner", discussion(0))
        storage = api.library.storage
        memory = storage.backend.memory  # type: ignore[attr-defined]
        generation = memory.generation
        await api.library.checkpoints.current()  # signed through this writer
        await api.publish("owner", discussion(1))
        assert memory.generation == generation
        other = storage_for(db, founding.genesis)
        other.clock = clock
        await other.open()
        try:
            await api.publish("owner", discussion(2))  # after whatever opening wrote
            generation = memory.generation
            await other.write(lambda conn: sign_checkpoint_now(conn, other, founding.log_key),
                              keeps_memory=True)
            await api.publish("owner", discussion(3))
            assert (memory.generation == generation) == (backend == "postgresql")
            generation = memory.generation
            await other.probe_write()  # a write that may change what writers remember
            await api.publish("owner", discussion(4))
            assert memory.generation > generation
        finally:
            await other.close()
        assert (await signed(api))[0] == 7


async def test_on_demand_signing_is_paced_and_each_answer_covers_the_tree_it_found(
    founding: Founding, clock: Clock, db: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client polling the checkpoint while the log grows gets, each time, a checkpoint of at
    least the tree it found, but a process signs on demand at most once per
    ``ON_DEMAND_INTERVAL_S``: a request arriving sooner waits for the next signing, and the
    requests waiting together share it."""
    monkeypatch.setattr(checkpoint_signer, "ON_DEMAND_INTERVAL_S", 0.5)
    async with server(db, founding, clock) as api:
        await api.publish("owner", discussion(0))
        assert (await signed(api))[0] == 3
        started = time.monotonic()
        await api.publish("owner", discussion(1))
        assert (await signed(api))[0] == 4  # signed after the interval, not refused
        assert time.monotonic() - started >= 0.45
        await api.publish("owner", discussion(2))
        sizes = await asyncio.gather(*(signed(api) for _ in range(5)))
        assert [size for size, _root in sizes] == [5] * 5
        assert len({root for _size, root in sizes}) == 1
        rows = await api.library.storage.read(lambda conn: log.checkpoints_after(conn, 0))
        assert [row.size for row in rows] == [3, 4, 5]


async def test_a_database_behind_what_was_published_serves_no_checkpoint(
    founding: Founding, clock: Clock, tmp_path: Path
) -> None:
    """A backup restored without catching up holds its own latest checkpoint, of its whole
    tree: the background signer learns it (nothing is due), and it is still never served
    while the log is behind the checkpoint the log key published (``CATCH_UP_REQUIRED``)."""
    db, backup = tmp_path / "library.db", tmp_path / "backup.db"
    published = PublishedCheckpoint(tmp_path / "log.key.published")
    async with server(db, founding, clock, published=published) as api:
        await api.publish("owner", discussion(0))
        old_size = (await signed(api))[0]
    shutil.copyfile(db, backup)  # the server is stopped: the file is the whole database
    async with server(db, founding, clock, authorities=False, published=published) as api:
        await api.publish("owner", discussion(1))
        assert (await signed(api))[0] == old_size + 1
    async with server(backup, founding, clock, authorities=False, published=published) as api:
        assert await api.library.checkpoints.tick() is not None  # learnt, not signed
        r = await api.client.get("/api/log/checkpoint")
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "CATCH_UP_REQUIRED"
        assert r.json()["details"]["published_size"] == old_size + 1
