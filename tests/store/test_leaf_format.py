"""Libraries record their leaf format (``meta.leaf_format``); a library whose log was written
before leaves committed to their admission times is refused at start — by the storage, by
``alexandria serve`` and by ``alexandria export --db`` — with a message that says what to do.
SQLite only: a library of the old leaf format can only be a SQLite file (PostgreSQL storage
came after the format, and ``alexandria migrate`` copies from a library the storage has opened,
so refused)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from alexandria.api.status import status_of
from alexandria.core.leaf import LEAF_FORMAT
from alexandria.reads import export
from alexandria.service.bootstrap import Founding
from alexandria.store.schema import OldLeafFormat
from alexandria.store.sqlite import sqlite_storage
from tests.support.liveserver import write_library_files


async def _library(path: Path, founding: Founding, admit: bool = True) -> None:
    storage = sqlite_storage(path, founding.genesis)
    await storage.open()
    try:
        if admit:
            for doc in founding.authority_documents():
                await storage.admit_authority(doc)
    finally:
        await storage.close()


def _meta(path: Path, key: str) -> str | None:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


def _make_old(path: Path) -> None:
    """What a library of the earlier format looks like: leaves, no leaf format recorded, and
    the index that found authority documents by leaf hash."""
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM meta WHERE key = 'leaf_format'")
    conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS log_document_hash ON log(leaf_hash)"
                 " WHERE type != 'contribution'")
    conn.commit()
    conn.close()


async def _old_library(tmp_path: Path, founding: Founding) -> Path:
    """A library at ``tmp_path/old.db`` whose log was written in the old leaf format."""
    db = tmp_path / "old.db"
    await _library(db, founding)
    _make_old(db)
    return db


def _schema_and_meta(path: Path) -> list[tuple[str, ...]]:
    conn = sqlite3.connect(path)
    try:
        return [*conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name"),
                *conn.execute("SELECT key, value FROM meta ORDER BY key")]
    finally:
        conn.close()


async def test_a_new_library_records_its_leaf_format(tmp_path: Path, founding: Founding) -> None:
    db = tmp_path / "new.db"
    await _library(db, founding)
    assert _meta(db, "leaf_format") == LEAF_FORMAT == "alexandria.leaf/2"
    await _library(db, founding)  # and opens again


async def test_an_empty_library_without_a_format_is_new(tmp_path: Path, founding: Founding) -> None:
    db = tmp_path / "empty.db"
    await _library(db, founding, admit=False)
    _make_old(db)  # nothing admitted: nothing of an older format to refuse
    await _library(db, founding)
    assert _meta(db, "leaf_format") == LEAF_FORMAT


async def test_a_library_of_the_old_leaf_format_is_refused(
    tmp_path: Path, founding: Founding,
) -> None:
    db = await _old_library(tmp_path, founding)
    storage = sqlite_storage(db, founding.genesis)
    with pytest.raises(OldLeafFormat) as info:
        await storage.open()
    await storage.close()
    err = info.value
    assert err.code == "OLD_LEAF_FORMAT" and status_of(err) == 503
    assert "JCS(document), without its admission time" in err.message
    assert "create the library afresh" in err.message
    assert err.details == {"found": None, "expected": LEAF_FORMAT, "path": str(db)}
    with pytest.raises(OldLeafFormat):
        list(export.iter_db(db))
    # a format this version does not know is refused the same way, naming it
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO meta(key, value) VALUES ('leaf_format', 'alexandria.leaf/9')")
    conn.commit()
    conn.close()
    with pytest.raises(OldLeafFormat) as info:
        list(export.iter_db(db))
    assert info.value.details["found"] == "alexandria.leaf/9"


async def test_serve_refuses_the_old_format_before_serving(
    tmp_path: Path, founding: Founding,
) -> None:
    genesis, log_key = write_library_files(founding, tmp_path)
    db = await _old_library(tmp_path, founding)
    r = subprocess.run(
        [sys.executable, "-m", "alexandria.cli", "serve", "--genesis", str(genesis), "--db",
         str(db), "--log-key", str(log_key), "--port", "1"],
        capture_output=True, timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert b"[OLD_LEAF_FORMAT]" in r.stderr and b"create the library afresh" in r.stderr
    assert b"serving" not in r.stdout


async def test_an_old_library_is_refused_before_anything_is_written_to_it(
    tmp_path: Path, founding: Founding,
) -> None:
    db = await _old_library(tmp_path, founding)
    before = _schema_and_meta(db)
    assert any(row[1] == "log_document_hash" for row in before)
    storage = sqlite_storage(db, founding.genesis)
    with pytest.raises(OldLeafFormat):
        await storage.open()
    await storage.close()
    assert _schema_and_meta(db) == before
