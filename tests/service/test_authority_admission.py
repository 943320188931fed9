"""``POST /api/authority`` does its signature work before the single writer, and a key
signing a document twice is refused unverified (one 61 KB document of duplicated
signatures cost ~42 ms of writer time, and ordinary admissions waited behind it).

Black-box against a live ``alexandria serve``: while another connection holds the database's
write lock (so the server's writer cannot start a transaction), every refusal that needs no
ledger state is still answered, and a document that does need the writer waits for it."""

from __future__ import annotations

import copy
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from alexandria.core.keys import SigningKey
from alexandria.core.trust import make_authority_certificate, make_revocation
from alexandria.rules import authority
from alexandria.service.bootstrap import Founding, derive_key
from tests.support.library import T0
from tests.support.liveserver import NewDb, Server, serving, write_library_files

FAR = "2036-01-01T00:00:00.000Z"


@pytest.fixture
def library_db(tmp_path: Path, new_db: NewDb) -> Path | str:
    return new_db(tmp_path / "lib.db")


@pytest.fixture
def server(tmp_path: Path, founding: Founding, library_db: Path | str) -> Iterator[Server]:
    genesis, log_key = write_library_files(founding, tmp_path)
    with serving(genesis, library_db, log_key) as s:
        for doc in founding.authority_documents():
            httpx.post(f"{s.url}/api/authority", json=doc).raise_for_status()
        yield s


def _log_size(server: Server) -> int:
    size: int = httpx.get(f"{server.url}/healthz").json()["log_size"]
    return size


def _doubled(doc: dict[str, Any], times: int) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["signatures"] = out["signatures"] * times
    return out


def test_a_key_signing_twice_is_refused_and_nothing_is_admitted(
    server: Server, founding: Founding
) -> None:
    size = _log_size(server)
    # the audit's document: one root signature repeated until the body is ~61 KB
    flood = _doubled(founding.authority_certificate, 280)
    revocation = _doubled(make_revocation(founding.genesis, founding.participants["owner"]
                                          .worker.public_hex, "lost", [founding.authority]), 2)
    for doc in (flood, revocation):
        r = httpx.post(f"{server.url}/api/authority", json=doc)
        assert r.status_code == 403, r.text
        assert r.json() == {
            "error": f"key {doc['signatures'][0]['key']} signs the document twice: each key"
                     " signs at most once",
            "code": "DUPLICATE_SIGNATURE",
            "details": {"pointer": "/signatures/1", "key": doc["signatures"][0]["key"]},
        }
    assert _log_size(server) == size
    # the same documents signed once each are what they always were
    assert httpx.post(f"{server.url}/api/authority",
                      json=founding.authority_certificate).status_code == 200
    once = copy.deepcopy(revocation)
    once["signatures"] = once["signatures"][:1]
    assert httpx.post(f"{server.url}/api/authority", json=once).status_code == 201
    assert _log_size(server) == size + 1


class _WriteLock:
    """Another connection's write transaction on the server's database: the server's writer
    waits for it (``SqliteBackend.begin``; on PostgreSQL the row lock of ``ledger_writes``
    every writer takes first), reads do not."""

    def __init__(self, db: Path | str) -> None:
        self.conn: Any
        if isinstance(db, str):
            self.conn = psycopg.connect(db, autocommit=True)
            self.conn.execute("BEGIN")
            self.conn.execute("SELECT version FROM ledger_writes WHERE id = 1 FOR UPDATE")
        else:
            self.conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
            self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


def test_signature_refusals_do_not_wait_for_the_writer(
    server: Server, founding: Founding, library_db: Path | str
) -> None:
    f = founding
    new_key = derive_key(b"issue 21", "another authority").public_hex
    forged = make_authority_certificate(f.genesis, new_key, ["native-application"], T0, FAR,
                                        f.roots)
    forged["certificate"]["not_after"] = "2099-01-01T00:00:00.000Z"  # changed after signing
    stranger = make_authority_certificate(f.genesis, new_key, ["native-application"], T0, FAR,
                                          [SigningKey(b"s" * 32)])
    lock = _WriteLock(library_db)
    pending: dict[str, httpx.Response] = {}
    good = make_authority_certificate(f.genesis, new_key, ["native-application"], T0, FAR,
                                      f.roots)
    waiting = threading.Thread(target=lambda: pending.setdefault(
        "good", httpx.post(f"{server.url}/api/authority", json=good, timeout=60)))
    try:
        waiting.start()
        with httpx.Client(base_url=server.url, timeout=20) as client:
            for doc, status, code in (
                (_doubled(f.authority_certificate, 280), 403, "DUPLICATE_SIGNATURE"),
                (forged, 403, "AUTHORITY_SIGNATURES"),
                (stranger, 403, "AUTHORITY_SIGNATURES"),
                (f.participants["owner"].certificate, 400, "NOT_AN_AUTHORITY_DOCUMENT"),
            ):
                r = client.post("/api/authority", json=doc)
                assert (r.status_code, r.json()["code"]) == (status, code), r.text
            # the valid document needs the ledger (is it a retry? was its key revoked?): it
            # is still waiting for the writer, which is still waiting for the lock
            assert "good" not in pending
    finally:
        lock.release()
    waiting.join(60)
    assert pending["good"].status_code == 201, pending["good"].text


def test_signature_work_is_bounded_by_the_root_keys(
    founding: Founding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However many signatures a document carries, preparing it verifies at most one per root
    key, plus one (a revocation's lone signer): the rest cannot count, so are never verified."""
    import alexandria.core.trust as trust

    calls: list[str] = []
    real = trust.verify

    def counting(key: str, signature: str, data: bytes) -> bool:
        calls.append(key)
        return real(key, signature, data)

    monkeypatch.setattr(trust, "verify", counting)
    f = founding
    cert = copy.deepcopy(f.authority_certificate)
    cert["signatures"] += [{"key": derive_key(b"many", str(i)).public_hex, "signature": "0" * 128}
                           for i in range(400)]
    prepared = authority.prepare_authority_document(cert, f.genesis)
    assert prepared.certificate is not None and len(calls) <= len(f.genesis.root_keys)
    calls.clear()
    revocation = make_revocation(f.genesis, f.authority.public_hex, "test", f.roots)
    revocation["signatures"] += cert["signatures"][1:]
    claim = authority.prepare_authority_document(revocation, f.genesis).revocation
    assert claim is not None and claim.verified == set(f.genesis.root_keys)
    assert len(calls) <= len(f.genesis.root_keys) + 1
