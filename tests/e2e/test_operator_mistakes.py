"""Two ordinary operator mistakes, on real servers and commands, on both backends: restoring an
older backup (or another history) and serving it, and restoring or migrating while a server
uses the database.  Neither may cost an acknowledged contribution: writes are refused with a
typed 503 that says how to recover, ``/healthz`` and ``alexandria_ready`` say why, and once
recovered every acknowledged contribution is served, the sequences are gapless and
``alexandria verify`` passes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import orjson
import pytest

from alexandria.core import note
from alexandria.core.checkpoint import parse_checkpoint
from alexandria.service.bootstrap import Founding
from alexandria.service.witness import init_witness_dir
from alexandria.store.backends import open_readonly
from alexandria.store.postgresql import is_database_url
from tests.support.liveserver import NewDb, serving, write_library_files
from tests.support.ops import Writer, backed_up_midway, cli, origin_files
from tests.support.witness import WitnessProcess

pytestmark = pytest.mark.slow


def refused(url: str, writer: Writer, code: str) -> None:
    """A node that may not extend its log: no write taken, not ready, and it says why."""
    r = httpx.post(f"{url}/api/entries", content=orjson.dumps(writer.envelope()), timeout=30)
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["code"] == code, body
    # the message says how to recover
    assert "restore" in body["error"] and "--catch-up" in body["error"], body["error"]
    r = httpx.post(f"{url}/api/authority", json=writer.founding.authority_documents()[0])
    assert r.status_code == 503 and r.json()["code"] == code, r.text
    health = httpx.get(f"{url}/healthz", timeout=30)
    assert health.status_code == 503, health.text
    assert health.json()["ready"] is False
    assert any(code in reason for reason in health.json()["reasons"]), health.json()
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    assert "alexandria_ready 0.0" in metrics


def gapless(db: Path | str) -> int:
    with open_readonly(db) as conn:
        sequences = [int(s) for (s,) in conn.execute("SELECT sequence FROM log ORDER BY sequence")]
    assert sequences == list(range(1, len(sequences) + 1))
    return len(sequences)


def all_served(url: str, acknowledged: list[str]) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        for rev in acknowledged:
            assert client.get(f"/api/entries/{rev}").status_code == 200, rev


def verified(tmp_path: Path, founding: Founding, url: str, name: str) -> None:
    export = tmp_path / f"{name}.jsonl"
    cli("export", "--url", url, "-o", str(export))
    cli("verify", "--genesis-pin", founding.genesis.pin, str(export))


def test_a_restored_older_backup_takes_no_write_until_caught_up(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    genesis, log_key, db = origin_files(tmp_path, founding, new_db)
    backup = tmp_path / "old.db"
    with serving(genesis, db, log_key) as origin:
        writer = backed_up_midway(founding, origin.url, db, backup, 12, 50)  # backup: 14 leaves
        r = httpx.get(f"{origin.url}/api/log/checkpoint", timeout=30)
        assert r.status_code == 200 and r.text.split("\n")[1] == "64"
        acknowledged = list(writer.acknowledged)
        writer.close()
    export = tmp_path / "before.jsonl"
    cli("export", "--db", str(db), "-o", str(export))
    # the mistake: the old backup over the database, without the log key
    out = cli("restore", str(backup), "--db", str(db), "--replace", check=False)
    assert out.returncode == 1 and "CATCH_UP_REQUIRED" in out.stderr, out.stderr
    assert "published a checkpoint of size 64" in out.stderr
    writer.client = httpx.Client(timeout=30)
    # served without the log key, and with it: nothing admitted either way
    for key in (None, log_key):
        with serving(genesis, db, key) as node:
            writer.client = httpx.Client(base_url=node.url, timeout=30)
            refused(node.url, writer, "CATCH_UP_REQUIRED")
            assert httpx.get(f"{node.url}/api/entries/{acknowledged[-1]}").status_code == 404
            writer.close()
    assert gapless(db) == 14
    # the runbook: catch up from an export (or a mirror), and every acknowledgement is back
    cli("restore", "--db", str(db), "--catch-up", str(export), "--log-key", str(log_key))
    with serving(genesis, db, log_key) as node:
        assert httpx.get(f"{node.url}/healthz").status_code == 200
        all_served(node.url, acknowledged)
        writer.client = httpx.Client(base_url=node.url, timeout=30)
        writer.publish(3)
        writer.close()
        assert httpx.get(f"{node.url}/api/log/checkpoint").text.split("\n")[1] == "67"
        verified(tmp_path, founding, node.url, "after")
    assert gapless(db) == 67


def test_another_history_is_never_restored_nor_extended(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    """What the trial did on today's main: the old backup served elsewhere and admitting (a
    fork of the published log), then put in the library's place."""
    genesis, log_key, db = origin_files(tmp_path, founding, new_db)
    backup = tmp_path / "old.db"
    with serving(genesis, db, log_key) as origin:
        writer = backed_up_midway(founding, origin.url, db, backup, 12, 50)
        assert httpx.get(f"{origin.url}/api/log/checkpoint").text.split("\n")[1] == "64"
        acknowledged = list(writer.acknowledged)
        writer.close()
    kept = [bytes(h) for h in _leaf_hashes(db)]
    # the fork: the old backup restored elsewhere and written to (no log key: nothing signs)
    other = tmp_path / "fork.db"
    cli("restore", str(backup), "--db", str(other))
    with serving(genesis, other) as forked:
        fork_writer = Writer(founding, forked.url)
        fork_writer.root = acknowledged[0]
        fork_writer.count = 500
        fork_writer.publish(60)
        fork_writer.close()
    # restoring it over the library is refused: nothing changes
    out = cli("restore", str(other), "--db", str(db), "--replace", check=False)
    assert out.returncode != 0 and "LOG_FORKED" in out.stderr, out.stderr
    assert _leaf_hashes(db) == kept
    if not is_database_url(db):
        # a copy behind the tools' back: the node finds out from LOG_KEY.published
        cli("backup", "--db", str(db), str(tmp_path / "good.db"))
        cli("backup", "--db", str(other), str(tmp_path / "fork-copy.db"))
        Path(f"{db}-wal").unlink(missing_ok=True)
        Path(f"{db}-shm").unlink(missing_ok=True)
        shutil.copyfile(tmp_path / "fork-copy.db", db)
        with serving(genesis, db, log_key) as node:
            writer.client = httpx.Client(base_url=node.url, timeout=30)
            refused(node.url, writer, "LOG_FORKED")
            r = httpx.get(f"{node.url}/api/log/checkpoint", timeout=30)
            assert r.status_code == 503 and r.json()["code"] == "LOG_FORKED"
            writer.close()
        assert len(_leaf_hashes(db)) == 74  # nothing admitted on the fork
        # the runbook: a backup at least as new as the published checkpoint
        cli("restore", str(tmp_path / "good.db"), "--db", str(db), "--replace",
            "--log-key", str(log_key))
    with serving(genesis, db, log_key) as node:
        assert httpx.get(f"{node.url}/healthz").status_code == 200
        all_served(node.url, acknowledged)
        writer.client = httpx.Client(base_url=node.url, timeout=30)
        writer.publish(2)
        writer.close()
        verified(tmp_path, founding, node.url, "after")
    assert gapless(db) == 66


def _leaf_hashes(db: Path | str) -> list[bytes]:
    with open_readonly(db) as conn:
        return [bytes(h) for (h,) in conn.execute("SELECT leaf_hash FROM log ORDER BY sequence")]


def test_a_node_that_never_served_the_checkpoint_cannot_fork_it(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    """Two nodes on one PostgreSQL database: only the first holds the log key.  After the
    old backup is restored, the second (which never served a checkpoint, has no
    ``LOG_KEY.published``) learns the published checkpoint from the database."""
    genesis, log_key, db = origin_files(tmp_path, founding, new_db)
    if not is_database_url(db):
        pytest.skip("several nodes share a PostgreSQL database")
    backup = tmp_path / "old.db"
    with serving(genesis, db, log_key) as signer, serving(genesis, db) as other:
        writer = backed_up_midway(founding, other.url, db, backup, 12, 30)
        assert httpx.get(f"{signer.url}/api/log/checkpoint").text.split("\n")[1] == "44"
        acknowledged = list(writer.acknowledged)
        writer.close()
    export = tmp_path / "before.jsonl"
    cli("export", "--db", str(db), "-o", str(export))
    out = cli("restore", str(backup), "--db", str(db), "--replace", check=False)
    assert out.returncode == 1 and "CATCH_UP_REQUIRED" in out.stderr, out.stderr
    with serving(genesis, db) as other:
        writer.client = httpx.Client(base_url=other.url, timeout=30)
        refused(other.url, writer, "CATCH_UP_REQUIRED")
        writer.close()
    cli("restore", "--db", str(db), "--catch-up", str(export))
    with serving(genesis, db, log_key) as signer, serving(genesis, db) as other:
        all_served(other.url, acknowledged)
        writer.client = httpx.Client(base_url=other.url, timeout=30)
        writer.publish(2)
        writer.close()
        verified(tmp_path, founding, signer.url, "after")
    assert gapless(db) == 46


def test_restore_and_migrate_refuse_while_a_server_uses_the_database(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    genesis, log_key, db = origin_files(tmp_path, founding, new_db)
    backup = tmp_path / "old.db"
    with serving(genesis, db, log_key, workers=2) as origin:
        writer = backed_up_midway(founding, origin.url, db, backup, 10, 10)
        out = cli("restore", str(backup), "--db", str(db), "--replace", check=False)
        assert out.returncode == 1 and "DATABASE_IN_USE" in out.stderr, out.stderr
        assert "a server is using" in out.stderr and "stop it" in out.stderr
        if is_database_url(db):
            assert "node sessions" in out.stderr
            # nor may a migrate copy into it
            out = cli("migrate", "--db", str(backup), "--to", str(db), check=False)
        else:
            # the lock is checked before the target is even reached
            out = cli("migrate", "--db", str(db), "--to", "postgresql:///nowhere", check=False)
        assert out.returncode == 1 and "DATABASE_IN_USE" in out.stderr, out.stderr
        writer.publish(10)  # the server goes on, its data intact
        all_served(origin.url, writer.acknowledged)
        acknowledged = list(writer.acknowledged)
        writer.close()
    with serving(genesis, db, log_key) as node:
        assert httpx.get(f"{node.url}/healthz").status_code == 200
        all_served(node.url, acknowledged)
        verified(tmp_path, founding, node.url, "after")
    assert gapless(db) == 32
    # once stopped, the restore goes ahead (and knows what was published)
    out = cli("restore", str(backup), "--db", str(db), "--replace", check=False)
    assert out.returncode == 1 and "CATCH_UP_REQUIRED" in out.stderr, out.stderr


@pytest.mark.sqlite_only
def test_a_witness_tells_a_node_restored_behind_what_it_cosigned(
    tmp_path: Path, founding: Founding, new_db: NewDb
) -> None:
    """The database and LOG_KEY.published both lost: the old backup restored into a new file,
    served with a copy of the log key.  The witness, asked at start, holds a larger checkpoint:
    the node admits nothing."""
    origin = founding.genesis.origin
    log_vkey = note.Verifier(origin, note.ED25519, founding.log_key.public_bytes).vkey
    identity = init_witness_dir(tmp_path / "w1", "witness.example/w1")
    witness = WitnessProcess(tmp_path / "w1", [f"{origin}={log_vkey}"])
    options = ("--witness", f"witness.example/w1={witness.url}+{identity.verifier.vkey}",
               "--witness-quorum", "1")
    try:
        genesis, log_key, db = origin_files(tmp_path, founding, new_db)
        backup = tmp_path / "old.db"
        with serving(genesis, db, log_key, extra=options) as node:
            writer = backed_up_midway(founding, node.url, db, backup, 12, 10)
            _wait_cosigned(node.url, 24)
            writer.close()
        genesis2, log_key2 = write_library_files(founding, tmp_path / "elsewhere")
        lost = new_db(tmp_path / "elsewhere" / "lib.db")
        cli("restore", str(backup), "--db", str(lost))
        with serving(genesis2, lost, log_key2, extra=options) as node:
            deadline = time.monotonic() + 30
            while httpx.get(f"{node.url}/healthz").status_code == 200:
                assert time.monotonic() < deadline, "the witness was never asked"
                time.sleep(0.1)
            writer.client = httpx.Client(base_url=node.url, timeout=30)
            refused(node.url, writer, "CATCH_UP_REQUIRED")
            writer.close()
            reasons = httpx.get(f"{node.url}/healthz").json()["reasons"]
            assert "24" in reasons[0], reasons
    finally:
        witness.stop()


def _wait_cosigned(url: str, size: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = httpx.get(f"{url}/api/log/checkpoint", timeout=30)
        cp, sigs = parse_checkpoint(r.text)
        if cp.size >= size and len(sigs) >= 2:
            return
        time.sleep(0.2)
    raise AssertionError(f"no cosigned checkpoint of size {size}")
