"""``alexandria mirror``: a live origin, a live mirror, a stream of admissions; restarts,
doctored origins (a changed leaf, a rewritten tail) and refused writes."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import httpx
import orjson
import pytest

from alexandria.service.bootstrap import Founding
from tests.liveserver import serving, write_library_files
from tests.ops_support import (
    Writer,
    cli,
    leaf_hashes,
    log_size,
    mirror,
    same_checkpoint,
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


def test_mirror_follows_resumes_and_refuses_writes(tmp_path: Path, founding: Founding) -> None:
    genesis, log_key = write_library_files(founding, tmp_path / "origin")
    with serving(genesis, tmp_path / "origin" / "lib.db", log_key) as origin:
        writer = Writer(founding, origin.url)
        writer.admit_authorities()
        writer.publish(40)
        replica = mirror(origin.url, tmp_path / "mirror.db", founding.genesis.pin)
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
        stored = leaf_hashes(tmp_path / "mirror.db")
        writer.publish(10)
        replica = mirror(origin.url, tmp_path / "mirror.db", founding.genesis.pin)
        try:
            wait_for(lambda: same_checkpoint(origin.url, replica.url)
                     and log_size(replica.url) == log_size(origin.url), what="the restart")
            same_reads(origin.url, replica.url, writer)
            assert leaf_hashes(tmp_path / "mirror.db")[: len(stored)] == stored
        finally:
            err = stop_and_read(replica)
        # it resumed: only the ten new entries were fetched, verified and stored
        assert f"{first_size + 10} entries (10 stored since start)" in err, err
        writer.close()
    # what the mirror holds verifies offline like the origin's log
    export = tmp_path / "mirror.jsonl"
    cli("export", "--db", str(tmp_path / "mirror.db"), "-o", str(export))
    cli("verify", "--genesis-pin", founding.genesis.pin, str(export))


def doctor_leaf(db: Path, sequence: int) -> None:
    """Change one character of a title inside the stored leaf ``sequence`` (same length)."""
    conn = sqlite3.connect(db)
    try:
        leaf = bytes(conn.execute("SELECT leaf FROM log WHERE sequence = ?",
                                  (sequence,)).fetchone()[0])
        assert b"Claim 0" in leaf
        conn.execute("UPDATE log SET leaf = ? WHERE sequence = ?",
                     (leaf.replace(b"Claim 0", b"Claim X", 1), sequence))
        conn.commit()
    finally:
        conn.close()


def test_mirror_stops_at_a_changed_leaf(tmp_path: Path, founding: Founding) -> None:
    genesis, log_key = write_library_files(founding, tmp_path / "origin")
    db = tmp_path / "origin" / "lib.db"
    with serving(genesis, db, log_key) as origin:
        writer = Writer(founding, origin.url)
        writer.admit_authorities()
        writer.publish(20)
        assert httpx.get(f"{origin.url}/api/log/checkpoint").status_code == 200
        writer.close()
    doctored = tmp_path / "doctored.db"
    shutil.copy(db, doctored)
    doctor_leaf(doctored, 15)
    with serving(genesis, doctored, log_key) as origin:
        replica = mirror(origin.url, tmp_path / "mirror.db", founding.genesis.pin)
        err = stop_with_error(replica)
    assert "sequence 15" in err, err
    assert "14 entries verified before it are kept" in err, err
    kept = leaf_hashes(tmp_path / "mirror.db")
    assert kept == leaf_hashes(db)[:14]


def test_mirror_stops_at_a_rewritten_tail(tmp_path: Path, founding: Founding) -> None:
    """The origin is replaced by a copy restored from an older backup that then admitted other
    entries (and, its published checkpoint lost, signed them): a fork."""
    genesis, log_key = write_library_files(founding, tmp_path / "origin")
    db = tmp_path / "origin" / "lib.db"
    old = tmp_path / "old.db"
    with serving(genesis, db, log_key) as origin:
        writer = Writer(founding, origin.url)
        writer.admit_authorities()
        writer.publish(10)
        cli("backup", "--db", str(db), str(old))  # 12 leaves
        writer.publish(10)
        replica = mirror(origin.url, tmp_path / "mirror.db", founding.genesis.pin)
        wait_for(lambda: same_checkpoint(origin.url, replica.url), what="the mirror")
        replica.stop()
        writer.close()
    forked_dir = tmp_path / "forked"
    forked_genesis, forked_key = write_library_files(founding, forked_dir)  # no .published
    shutil.copy(old, forked_dir / "lib.db")
    with serving(forked_genesis, forked_dir / "lib.db", forked_key) as forked:
        writer = Writer(founding, forked.url)
        writer.root = _first_revision(forked.url)
        writer.count = 50
        writer.publish(15)
        writer.close()
        assert httpx.get(f"{forked.url}/api/log/checkpoint").status_code == 200
        before = leaf_hashes(tmp_path / "mirror.db")
        replica = mirror(forked.url, tmp_path / "mirror.db", founding.genesis.pin)
        err = stop_with_error(replica)
    assert "sequence 13" in err and "LOG_FORKED" in err, err
    assert leaf_hashes(tmp_path / "mirror.db") == before


def _first_revision(url: str) -> str:
    entry = httpx.get(f"{url}/api/log/entries?start=2&end=3").json()["entries"][0]
    from alexandria.core.records import revision_id

    return revision_id(entry["leaf"]["document"]["record"])
