"""The largest published checkpoint in the database, checked by the writer whenever the
database may have changed under it (``store/log_floor.py``), and the lock every open storage
holds against ``restore --replace`` and ``migrate`` (``store/db_lock.py``)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import psycopg
import pytest

from alexandria.core.checkpoint import Checkpoint, sign_checkpoint
from alexandria.service.bootstrap import Founding
from alexandria.service.library import Library
from alexandria.service.published import PublishedCheckpoint, path_for
from alexandria.store import db_lock, log_floor
from alexandria.store.backends import open_readonly, storage_for
from alexandria.store.backup import backup
from tests.support.admission import claim, space
from tests.support.library import Api, Clock


@pytest.fixture
def node(guarded: Api) -> Api:
    """A library whose log key keeps ``LOG_KEY.published`` (``tests/conftest.guarded``)."""
    return guarded


def another_node_writes(db: Path | str, sql: str, *params: object) -> None:
    """A commit by another connection, as another process or node makes it (on PostgreSQL
    through the write lock every node's writer takes first)."""
    if isinstance(db, str):
        with psycopg.connect(db, autocommit=True) as pg, pg.transaction():
            pg.execute("UPDATE ledger_writes SET version = version + 1 WHERE id = 1")
            pg.execute(sql.replace("?", "%s").encode(), params)
        return
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql, params)
    conn.close()


async def test_each_checkpoint_is_recorded_in_the_database(node: Api, db: Path | str) -> None:
    root = (await node.publish("owner", space()))["id"]
    await node.publish("owner", claim(root))
    note = (await node.client.get("/api/log/checkpoint")).text
    with open_readonly(db) as conn:
        floors = log_floor.read_floor(conn)
    assert [f.note for f in floors] == [note] and floors[0].size == 4


async def test_the_writer_refuses_once_another_node_published_another_history(
    node: Api, db: Path | str, founding: Founding
) -> None:
    """The node looked at the log a moment ago and found it fine; another node then records a
    checkpoint this log does not extend.  The next admission is refused by the writer itself,
    inside its transaction, and the node reports not ready from then on."""
    root = (await node.publish("owner", space()))["id"]
    assert (await node.client.get("/api/log/checkpoint")).status_code == 200
    assert await node.library.log_problem(fresh=True) is None
    forged = sign_checkpoint(Checkpoint(founding.genesis.origin, 3, b"\x07" * 32),
                             founding.log_key)
    another_node_writes(db, "UPDATE meta SET value = ? WHERE key = ?", forged,
                        log_floor.META_KEY)
    r = await node.post(node.envelope("owner", claim(root)))
    assert r.status_code == 503, r.text
    assert r.json()["code"] == "LOG_FORKED"
    assert r.json()["details"]["published_size"] == 3
    health = await node.client.get("/healthz")
    assert health.status_code == 503
    assert "LOG_FORKED" in health.json()["reasons"][0]
    # nothing was admitted, nothing new signed
    assert await node.library.storage.log_size() == 3
    r = await node.client.get("/api/log/checkpoints")
    assert [c["size"] for c in r.json()["checkpoints"]] == [3]


async def test_a_larger_checkpoint_published_elsewhere_makes_the_node_wait(
    node: Api, db: Path | str, founding: Founding
) -> None:
    root = (await node.publish("owner", space()))["id"]
    ahead = sign_checkpoint(Checkpoint(founding.genesis.origin, 40, b"\x07" * 32),
                            founding.log_key)
    another_node_writes(db, "INSERT INTO meta(key, value) VALUES (?, ?)", log_floor.META_KEY,
                        ahead)
    r = await node.post(node.envelope("owner", claim(root)))
    assert r.status_code == 503 and r.json()["code"] == "CATCH_UP_REQUIRED", r.text
    assert r.json()["details"] == {"published_size": 40, "tree_size": 3}
    status = await node.library.status()
    assert not status.ready and "catching up" in status.reasons[0]


async def test_the_log_key_file_is_recorded_in_the_database_at_start(
    tmp_path: Path, founding: Founding, clock: Clock, db: Path | str
) -> None:
    """A node with ``--log-key`` tells every other (PostgreSQL) node, and the writer process,
    what its key published: they refuse to extend a log behind it."""
    keeper = PublishedCheckpoint(path_for(tmp_path / "log.key"))
    ahead = sign_checkpoint(Checkpoint(founding.genesis.origin, 9, b"\x07" * 32),
                            founding.log_key)
    keeper.record(9, ahead)
    first = Library(founding.genesis, storage_for(db, founding.genesis), founding.log_key,
                    published=keeper)
    await first.open()
    await first.close()
    second = Library(founding.genesis, storage_for(db, founding.genesis))  # no key
    await second.open()
    try:
        problem = await second.log_problem()
        assert problem is not None and problem.code == "CATCH_UP_REQUIRED"
        with pytest.raises(log_floor.CatchUpRequired):
            await second.storage.admit_authority(founding.authority_documents()[0])
    finally:
        await second.close()


async def test_a_node_does_not_start_while_a_restore_holds_the_database(
    tmp_path: Path, founding: Founding, db: Path | str
) -> None:
    storage = storage_for(db, founding.genesis)
    await storage.open()
    try:
        # a running node: the restore is refused
        if isinstance(db, str):
            with psycopg.connect(db, autocommit=True) as pg:
                with pytest.raises(db_lock.DatabaseInUse) as refused:
                    db_lock.pg_exclusive(pg, "the database", "restoring over it")
                assert refused.value.details["sessions"] == 1
        else:
            with pytest.raises(db_lock.DatabaseInUse), db_lock.exclusive(db, "restoring"):
                pass
    finally:
        await storage.close()
    # a restore under way: the node refuses to start
    other = storage_for(db, founding.genesis)
    if isinstance(db, str):
        with psycopg.connect(db, autocommit=True) as pg:
            db_lock.pg_exclusive(pg, "the database", "restoring over it")
            with pytest.raises(db_lock.DatabaseLocked):
                await other.open()
            await other.close()
    else:
        with db_lock.exclusive(db, "restoring over it"):
            with pytest.raises(db_lock.DatabaseLocked):
                await other.open()
            await other.close()
    # and once it is done, it does
    await other.open()
    await other.close()


@pytest.mark.sqlite_only
async def test_a_database_file_replaced_under_the_node_takes_no_write(
    node: Api, db: Path | str, tmp_path: Path
) -> None:
    root = (await node.publish("owner", space()))["id"]
    copy = tmp_path / "copy.db"
    backup(db, copy)
    os.replace(copy, db)  # behind the tools' back (restore refuses while the node runs)
    r = await node.post(node.envelope("owner", claim(root)))
    assert r.status_code == 503 and r.json()["code"] == "DATABASE_REPLACED", r.text
    assert "restart" in r.json()["error"]
    health = await node.client.get("/healthz")
    assert health.status_code == 503 and "DATABASE_REPLACED" in health.json()["reasons"][0]
