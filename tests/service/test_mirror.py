"""``alexandria mirror``: a live origin, a live mirror, a stream of admissions; restarts,
doctored origins (a changed leaf, a rewritten tail) and refused writes."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import httpx
import orjson
import psycopg
import pytest

from alexandria.service.bootstrap import Founding
from tests.support.liveserver import NewDb, serving, write_library_files
from tests.support.ops import (
    Writer,
    backed_up_midway,
    cli,
    leaf_hashes,
    log_size,
    mirror,
    origin_files,
    same_checkpoint,
    started_writer,
    stop_and_read,
    stop_with_error,
    wait_for,
)

pytestmark = pytest.mark.slow


def same_reads(origin: str, replica: str, writer: Writer) -> None:
    """The mirror's catalogue, objects and entries are the origin's, byte for byte."""
    paths = [f"/api/catalogue?q={q}" for q in ("claim", "mirrored", "")] + [
        f"/api/objects/{writer.root}", f"/api/entries/{writer.acknowledged[-1]}",
        f"/api/entries/{writer.acknowledged[1]}/head", "/api/authority", "/api/genesis",
        f"/api/log/entries?start=0&end={log_size(origin)}",
        "/api/log/checkpoints?after=0",  # every checkpoint the origin signed, as signed
    ]
    for path in paths:
        a = httpx.get(origin + path, timeout=30)
        b = httpx.get(replica + path, timeout=30)
        assert a.status_code == b.status_code, (path, a.text, b.text)
        if path == "/api/genesis":  # rendered from the parsed document: same value
            assert a.json() == b.json()
        else:
            assert a.content == b.content, path


def test_mirror_follows_resumes_and_refuses_writes(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path / "origin")
    mirror_db = new_db(tmp_path / "mirror.db")
    with serving(genesis, new_db(tmp_path / "origin" / "lib.db"), log_key) as origin:
        writer = started_writer(founding, origin.url, 40)
        replica = mirror(origin.url, mirror_db, founding.genesis.pin)
        try:
            # a stream of admissions while the mirror follows
            stream = threading.Thread(target=writer.publish, args=(40,))
            stream.start()
            stream.join()
            wait_for(lambda: same_checkpoint(origin.url, replica.url)
                     and log_size(replica.url) == log_size(origin.url), what="the mirror")
            same_reads(origin.url, replica.url, writer)
            health = httpx.get(f"{replica.url}/healthz").json()
            assert health["ready"] is True and health["origin"] == origin.url
            metrics = httpx.get(f"{replica.url}/metrics").text
            assert "alexandria_mirror_lag_entries 0.0" in metrics
            # writes are refused, naming the origin
            r = httpx.post(f"{replica.url}/api/entries", content=orjson.dumps(writer.envelope()))
            assert r.status_code == 403
            assert r.json()["code"] == "READ_ONLY_MIRROR"
            assert r.json()["details"]["origin"] == origin.url
            r = httpx.post(f"{replica.url}/api/authority",
                           json=founding.authority_documents()[0])
            assert r.status_code == 403 and r.json()["code"] == "READ_ONLY_MIRROR"
            r = httpx.post(f"{replica.url}/api/personal", content=b"{}")
            assert r.status_code == 403 and r.json()["code"] == "READ_ONLY_MIRROR"
            first_size = log_size(origin.url)
        finally:
            err = stop_and_read(replica)
        assert f"mirror: caught up with {origin.url}: {first_size} entries" in err, err
        # a restart resumes from what it stored
        stored = leaf_hashes(mirror_db)
        writer.publish(10)
        replica = mirror(origin.url, mirror_db, founding.genesis.pin)
        try:
            wait_for(lambda: same_checkpoint(origin.url, replica.url)
                     and log_size(replica.url) == log_size(origin.url), what="the restart")
            same_reads(origin.url, replica.url, writer)
            assert leaf_hashes(mirror_db)[: len(stored)] == stored
        finally:
            err = stop_and_read(replica)
        # it resumed: only the ten new entries were fetched, verified and stored
        assert f"{first_size + 10} entries (10 stored since start)" in err, err
        writer.close()
    # what the mirror holds verifies offline like the origin's log
    export = tmp_path / "mirror.jsonl"
    cli("export", "--db", str(mirror_db), "-o", str(export))
    cli("verify", "--genesis-pin", founding.genesis.pin, str(export))


def doctor_leaf(db: Path | str, sequence: int) -> None:
    """Change one character of a title inside the stored leaf ``sequence`` (same length; its
    stored ``leaf_hash`` kept)."""
    select = "SELECT leaf FROM log WHERE sequence = ?"
    update = "UPDATE log SET leaf = ? WHERE sequence = ?"
    if isinstance(db, str):  # a PostgreSQL URL
        with psycopg.connect(db, autocommit=True) as pg:
            row = pg.execute(select.replace("?", "%s"), (sequence,)).fetchone()
            assert row is not None and b"Claim 0" in bytes(row[0])
            pg.execute(update.replace("?", "%s"),
                       (bytes(row[0]).replace(b"Claim 0", b"Claim X", 1), sequence))
        return
    conn = sqlite3.connect(db)
    try:
        leaf = bytes(conn.execute(select, (sequence,)).fetchone()[0])
        assert b"Claim 0" in leaf
        conn.execute(update, (leaf.replace(b"Claim 0", b"Claim X", 1), sequence))
        conn.commit()
    finally:
        conn.close()


def test_mirror_stops_at_a_changed_leaf(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    genesis, log_key, db = origin_files(tmp_path, founding, new_db)
    with serving(genesis, db, log_key) as origin:
        writer = started_writer(founding, origin.url, 20)
        assert httpx.get(f"{origin.url}/api/log/checkpoint").status_code == 200
        writer.close()
    honest = leaf_hashes(db)
    doctor_leaf(db, 15)  # the stored leaf hashes are the honest ones
    mirror_db = new_db(tmp_path / "mirror.db")
    with serving(genesis, db, log_key) as origin:
        replica = mirror(origin.url, mirror_db, founding.genesis.pin)
        err = stop_with_error(replica)
    assert "sequence 15" in err, err
    assert "14 entries verified before it are kept" in err, err
    kept = leaf_hashes(mirror_db)
    assert kept == honest[:14]


def test_mirror_stops_at_a_rewritten_tail(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    """The origin is replaced by a copy restored from an older backup that then admitted other
    entries (and, its published checkpoint lost, signed them): a fork."""
    genesis, log_key, db = origin_files(tmp_path, founding, new_db)
    mirror_db = new_db(tmp_path / "mirror.db")
    old = tmp_path / "old.db"
    with serving(genesis, db, log_key) as origin:
        writer = backed_up_midway(founding, origin.url, db, old, 10, 10)  # backup: 12 leaves
        replica = mirror(origin.url, mirror_db, founding.genesis.pin)
        wait_for(lambda: same_checkpoint(origin.url, replica.url), what="the mirror")
        replica.stop()
        writer.close()
    forked_dir = tmp_path / "forked"
    forked_genesis, forked_key = write_library_files(founding, forked_dir)  # no .published
    forked_db = new_db(forked_dir / "lib.db")
    cli("restore", str(old), "--db", str(forked_db))
    with serving(forked_genesis, forked_db, forked_key) as forked:
        writer = Writer(founding, forked.url)
        writer.root = _first_revision(forked.url)
        writer.count = 50
        writer.publish(15)
        writer.close()
        assert httpx.get(f"{forked.url}/api/log/checkpoint").status_code == 200
        before = leaf_hashes(mirror_db)
        replica = mirror(forked.url, mirror_db, founding.genesis.pin)
        err = stop_with_error(replica)
    assert "sequence 13" in err and "LOG_FORKED" in err, err
    assert leaf_hashes(mirror_db) == before


def _first_revision(url: str) -> str:
    entry = httpx.get(f"{url}/api/log/entries?start=2&end=3").json()["entries"][0]
    from alexandria.core.records import revision_id

    return revision_id(entry["leaf"]["document"]["record"])
