"""Backups while admitting, a restore from the older backup, writes refused with a typed 503,
a catch-up from the mirror (or an export), and nothing acknowledged lost."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import orjson
import pytest

from alexandria.core import merkle
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.service.bootstrap import Founding
from alexandria.service.published import PublishedCheckpoint, path_for
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
    wait_for,
)

pytestmark = pytest.mark.slow


def changes_cursor(url: str, root: str) -> str:
    r = httpx.get(f"{url}/api/changes", params={"root": root, "limit": "50"})
    assert r.status_code == 200, r.text
    body = r.json()
    while body["has_more"]:
        r = httpx.get(f"{url}/api/changes",
                      params={"root": root, "limit": "50", "cursor": body["cursor"]})
        body = r.json()
    return str(body["cursor"])


def consistent(url: str, old_note: str, new_note: str) -> None:
    old, _ = parse_checkpoint(old_note)
    new, _ = parse_checkpoint(new_note)
    assert new.size >= old.size
    if new.size == old.size:
        assert new.root == old.root
        return
    proof = httpx.get(f"{url}/api/log/proof/consistency",
                      params={"old": old.size, "new": new.size}).json()["proof"]
    merkle.verify_consistency(old.size, new.size, old.root, new.root,
                              [bytes.fromhex(h) for h in proof])


def test_backup_restore_catch_up_loses_nothing(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    genesis, log_key, db = origin_files(tmp_path, founding, new_db)
    backup = tmp_path / "backup.db"
    with serving(genesis, db, log_key) as origin:
        writer = started_writer(founding, origin.url, 10)
        replica = mirror(origin.url, new_db(tmp_path / "mirror.db"), founding.genesis.pin)
        # back up while admissions stream in
        stream = threading.Thread(target=writer.publish, args=(60,))
        stream.start()
        cli("backup", "--db", str(db), str(backup))
        stream.join()
        writer.publish(5)
        before = httpx.get(f"{origin.url}/api/log/checkpoint").text
        cursor = changes_cursor(origin.url, writer.root)
        wait_for(lambda: same_checkpoint(origin.url, replica.url), what="the mirror")
        published = PublishedCheckpoint(path_for(log_key)).load()
        assert published is not None and published.note == before
        acknowledged = list(writer.acknowledged)
        full_size = log_size(origin.url)
        writer.close()
    try:
        # the backup is restored, but the restore is not complete while the checkpoint the
        # library published is not covered: the command says so and fails
        out = cli("restore", str(backup), "--db", str(db), "--replace", "--log-key",
                  str(log_key), check=False)
        assert out.returncode == 1 and "CATCH_UP_REQUIRED" in out.stderr, out.stderr
        backed_up = int(out.stderr.split("log entries")[0].rsplit(" ", 2)[-2])
        assert 12 <= backed_up < full_size  # an older backup: the tail is missing
        with serving(genesis, db, log_key) as origin:
            _restored_behind(origin.url, founding, writer, acknowledged, cursor, full_size,
                             backed_up)
            # catch up from the mirror while the library serves reads
            out = cli("restore", "--db", str(db), "--catch-up", replica.url,
                      "--log-key", str(log_key))
            assert (f"caught up from {replica.url}: {full_size - backed_up} entries"
                    in out.stderr), out.stderr
            wait_for(lambda: httpx.get(f"{origin.url}/healthz").status_code == 200,
                     what="ready again")
            # every acknowledged admission is back, the old cursor is honoured again
            for rev in acknowledged:
                assert httpx.get(f"{origin.url}/api/entries/{rev}").status_code == 200
            r = httpx.get(f"{origin.url}/api/changes",
                          params={"root": writer.root, "cursor": cursor})
            assert r.status_code == 200, r.text
            # writes resume, and the next checkpoint extends the last one published
            writer.client = httpx.Client(base_url=origin.url, timeout=30)
            writer.publish(3)
            writer.close()
            after = httpx.get(f"{origin.url}/api/log/checkpoint").text
            consistent(origin.url, before, after)
            # every checkpoint consistent with every earlier one (verify checks each one
            # against the one before it)
            export = tmp_path / "after.jsonl"
            cli("export", "--url", origin.url, "-o", str(export))
    finally:
        replica.stop()
    cli("verify", "--genesis-pin", founding.genesis.pin, str(export))


def _restored_behind(url: str, founding: Founding, writer: Writer, acknowledged: list[str],
                     cursor: str, full_size: int, backed_up: int) -> None:
    health = httpx.get(f"{url}/healthz")
    assert health.status_code == 503 and health.json()["live"] is True
    assert any("catching up" in r for r in health.json()["reasons"])
    # writes and checkpoints refused with the typed 503 saying how to catch up
    r = httpx.post(f"{url}/api/entries", content=orjson.dumps(writer.envelope()))
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["code"] == "CATCH_UP_REQUIRED" and "--catch-up" in body["error"]
    assert body["details"] == {"published_size": full_size, "tree_size": backed_up}
    r = httpx.post(f"{url}/api/authority", json=founding.authority_documents()[0])
    assert r.status_code == 503 and r.json()["code"] == "CATCH_UP_REQUIRED"
    r = httpx.get(f"{url}/api/log/checkpoint")
    assert r.status_code == 503 and r.json()["code"] == "CATCH_UP_REQUIRED"
    # reads are served; a cursor issued past the backup must resync (409)
    assert httpx.get(f"{url}/api/entries/{acknowledged[0]}").status_code == 200
    assert httpx.get(f"{url}/api/entries/{acknowledged[-1]}").status_code == 404
    r = httpx.get(f"{url}/api/changes", params={"root": writer.root, "cursor": cursor})
    assert r.status_code == 409 and r.json()["resync_required"] is True


def test_catch_up_from_an_export_and_a_refused_fork(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    genesis, log_key, db = origin_files(tmp_path, founding, new_db)
    backup = tmp_path / "backup.db"
    with serving(genesis, db, log_key) as origin:
        writer = backed_up_midway(founding, origin.url, db, backup, 8, 8)
        assert httpx.get(f"{origin.url}/api/log/checkpoint").status_code == 200
        acknowledged = list(writer.acknowledged)
        writer.close()
    export = tmp_path / "full.jsonl"
    cli("export", "--db", str(db), "-o", str(export))
    # a backup is never written over a file
    assert cli("backup", "--db", str(db), str(backup), check=False).returncode != 0
    # restoring over an existing database needs --replace
    assert cli("restore", str(backup), "--db", str(db), check=False).returncode != 0
    cli("restore", str(backup), "--db", str(db), "--replace", "--catch-up", str(export),
        "--log-key", str(log_key))
    with serving(genesis, db, log_key) as origin:
        assert httpx.get(f"{origin.url}/healthz").status_code == 200
        for rev in acknowledged:
            assert httpx.get(f"{origin.url}/api/entries/{rev}").status_code == 200
    # another library's tail is refused: the export of a fork
    other = tmp_path / "other"
    genesis2, log_key2 = write_library_files(founding, other)
    other_db = new_db(other / "lib.db")
    cli("restore", str(backup), "--db", str(other_db))
    with serving(genesis2, other_db, log_key2) as forked:
        writer = Writer(founding, forked.url)
        writer.root = acknowledged[0]
        writer.count = 90
        writer.publish(4)
        writer.close()
        assert httpx.get(f"{forked.url}/api/log/checkpoint").status_code == 200
    fork_export = tmp_path / "fork.jsonl"
    cli("export", "--db", str(other_db), "-o", str(fork_export))
    kept = leaf_hashes(db)
    out = cli("restore", "--db", str(db), "--catch-up", str(fork_export), check=False)
    assert out.returncode == 6  # verification failed (docs/cli.md)
    assert "sequence 11" in out.stderr and "LOG_FORKED" in out.stderr, out.stderr
    assert leaf_hashes(db) == kept
