"""Enrolment requests in their own table (``enrolment_requests``, ``store/schema.py``), never in
the log: the policy is ``service/enrolment.py``; this module is its SQL.

Refusals are decided on a read connection (``precheck_*``, ``open_requests``, ``request``):
the single writer never runs a transaction only to say no.  What is kept runs in the store's
group-commit writer (``storage.write``), which checks again, so the cap on open requests, the
single use of a code and the certificate's checks against the ledger's authorities hold
against racing requests.  Expired rows are never answered (every read asks ``expires_ms``) and
are deleted whenever a request is kept or approved.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from alexandria.core.trust import AuthorityCertificate, Genesis, WorkerCertificate
from alexandria.errors import Conflict, NotFound, NotPermitted, RateLimited
from alexandria.store.interface import Storage

_COLUMNS = "code, worker, name, scopes, requested_ms, expires_ms, certificate"


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    code, worker, name, scopes, requested, expires, certificate = values
    return {"code": code, "worker": worker, "name": name, "scopes": scopes.split(),
            "requested_ms": requested, "expires_ms": expires,
            "certificate": orjson.loads(certificate) if certificate else None}


def _expire(conn: sqlite3.Connection, now_ms: int) -> None:
    """Delete expired requests never approved.  An approved one is kept (its code answers no
    more once expired): it is where the library knows the name the operator approved."""
    conn.execute("DELETE FROM enrolment_requests WHERE expires_ms < ? AND certificate IS NULL",
                 (now_ms,))


#: Worker keys one ``approved_names`` call looks up.
MAX_NAME_LOOKUPS = 200


def approved_names(conn: sqlite3.Connection, workers: dict[str, str]) -> dict[str, str]:
    """``{actor: name}`` for the worker keys of ``workers`` (``{worker: actor}``) whose
    enrolment request the operator approved with a certificate for that actor: the name asked
    for at login and approved with it (the latest approval of a key, when several)."""
    keys = list(workers)[:MAX_NAME_LOOKUPS]
    if not keys:
        return {}
    marks = ", ".join("?" * len(keys))
    out: dict[str, str] = {}
    for worker, name, certificate in conn.execute(
        f"SELECT worker, name, certificate FROM enrolment_requests WHERE worker IN ({marks})"
        " AND certificate IS NOT NULL ORDER BY requested_ms", keys,
    ).fetchall():
        cert = orjson.loads(certificate)
        if cert.get("certificate", {}).get("actor") == workers[worker] and name:
            out[workers[worker]] = str(name)
    return out


def _check_room(conn: sqlite3.Connection, now_ms: int, max_open: int, worker: str) -> None:
    """``RateLimited`` when ``max_open`` requests are open (not expired) and ``worker`` holds
    none of them (its own would be replaced): retry when the oldest expires."""
    count, oldest = conn.execute(
        "SELECT count(*), min(expires_ms) FROM enrolment_requests WHERE expires_ms >= ?",
        (now_ms,)).fetchone()
    if count < max_open:
        return
    if conn.execute("SELECT 1 FROM enrolment_requests WHERE worker = ? AND certificate IS NULL"
                    " AND expires_ms >= ?", (worker, now_ms)).fetchone() is not None:
        return
    retry = max(0, (int(oldest) - now_ms) // 1000) + 1
    raise RateLimited(f"{max_open} enrolment requests are open, the most this library keeps:"
                      f" try again in {retry} s", "ENROLMENTS_FULL", retry_after=retry,
                      limit=max_open)


async def precheck_create(storage: Storage, worker: str, now_ms: int,
                          max_open: int) -> None:
    """Refuse a new request when the library keeps ``max_open`` already (a read)."""
    await storage.read(lambda conn: _check_room(conn, now_ms, max_open, worker))


async def create(storage: Storage, code: str, worker: str, name: str,
                 scopes: tuple[str, ...], now_ms: int, ttl_ms: int, max_open: int) -> int:
    """Store a new request; its expiry.  A worker key has one open request: asking again
    replaces it (a new code).  Raises ``RateLimited`` when ``max_open`` are open."""
    def fn(conn: sqlite3.Connection) -> int:
        _expire(conn, now_ms)
        _check_room(conn, now_ms, max_open, worker)
        conn.execute("DELETE FROM enrolment_requests WHERE worker = ? AND certificate IS NULL",
                     (worker,))
        conn.execute(
            f"INSERT INTO enrolment_requests({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (code, worker, name, " ".join(scopes), now_ms, now_ms + ttl_ms),
        )
        return now_ms + ttl_ms

    return await storage.write(fn)


def _get(conn: sqlite3.Connection, code: str, now_ms: int) -> dict[str, Any] | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM enrolment_requests WHERE code = ?"
                       " AND expires_ms >= ?", (code, now_ms)).fetchone()
    return _row(row) if row else None


async def get(storage: Storage, code: str, now_ms: int) -> dict[str, Any] | None:
    """The request ``code`` (by its primary key), unless expired."""
    return await storage.read(lambda conn: _get(conn, code, now_ms))


def _check_authority(conn: sqlite3.Connection, genesis: Genesis, key: str,
                     now_ms: int) -> None:
    """``key`` is a certified, unrevoked native-application authority of the ledger: read
    from its ``authorities`` and ``revocations`` tables, on any connection."""
    if conn.execute("SELECT 1 FROM revocations WHERE key = ? AND issuer = 'root'",
                    (key,)).fetchone() is None:
        for (document,) in conn.execute("SELECT document FROM authorities WHERE key = ?"
                                        " ORDER BY sequence", (key,)).fetchall():
            cert = AuthorityCertificate.from_document(orjson.loads(document), genesis)
            if "native-application" in cert.roles and cert.valid_at(now_ms):
                return
    raise NotPermitted("not a certified, unrevoked native-application authority of this"
                       " library", "AUTHORITY_UNKNOWN", authority=key)


async def check_authority(storage: Storage, key: str, now_ms: int) -> None:
    await storage.read(lambda conn: _check_authority(conn, storage.genesis, key, now_ms))


async def open_requests(storage: Storage, now_ms: int, limit: int, authority: str
                        ) -> tuple[list[dict[str, Any]], int]:
    """Up to ``limit`` requests not approved yet and not expired, oldest first, and how many
    there are, for ``authority`` (the key that signed the question: it must be certified and
    unrevoked).  A read: a stranger's key is refused without the writer."""
    def fn(conn: sqlite3.Connection) -> tuple[list[dict[str, Any]], int]:
        _check_authority(conn, storage.genesis, authority, now_ms)
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM enrolment_requests WHERE certificate IS NULL"
            " AND expires_ms >= ? ORDER BY requested_ms, code LIMIT ?",
            (now_ms, limit)).fetchall()
        (total,) = conn.execute("SELECT count(*) FROM enrolment_requests WHERE certificate"
                                " IS NULL AND expires_ms >= ?", (now_ms,)).fetchone()
        return [_row(r) for r in rows], int(total)

    return await storage.read(fn)


async def request(storage: Storage, code: str, now_ms: int, authority: str
                  ) -> dict[str, Any]:
    """The open request ``code`` for ``authority`` (as ``open_requests``), however many wait;
    ``NotFound`` when expired or never made."""
    def fn(conn: sqlite3.Connection) -> dict[str, Any]:
        _check_authority(conn, storage.genesis, authority, now_ms)
        row = _get(conn, code, now_ms)
        if row is None:
            raise NotFound(f"no open enrolment request {code} (expired, or never made)",
                           "UNKNOWN_CODE", enrolment=code)
        return row

    return await storage.read(fn)


def _check_approval(conn: sqlite3.Connection, genesis: Genesis, code: str,
                    cert: WorkerCertificate, now_ms: int) -> None:
    """The issuer first: a self-made authority learns nothing of which codes exist."""
    _check_authority(conn, genesis, cert.authority, now_ms)
    row = _get(conn, code, now_ms)
    if row is None:
        raise NotFound(f"no open enrolment request {code} (expired, or never made)",
                       "UNKNOWN_CODE", enrolment=code)
    if row["certificate"] is not None:
        raise Conflict(f"enrolment request {code} is already approved: a code approves"
                       " once", "CODE_USED", enrolment=code)
    if cert.worker != row["worker"]:
        raise NotPermitted("the certificate is for another key than the request's",
                           "CERTIFICATE_KEY_MISMATCH", worker=row["worker"],
                           certificate_worker=cert.worker)
    if not cert.valid_at(now_ms):
        raise NotPermitted("the certificate is not valid now", "CERTIFICATE_NOT_VALID")


async def approve(storage: Storage, code: str, cert: WorkerCertificate, now_ms: int
                  ) -> None:
    """Attach a worker certificate to the open request ``code``: once.  The certificate must be
    for the requesting key, valid now, and issued by a certified, unrevoked native-application
    authority of this ledger.  Every refusal is decided on a read connection first."""
    await storage.read(lambda conn: _check_approval(conn, storage.genesis, code, cert, now_ms))

    def fn(conn: sqlite3.Connection) -> None:
        _expire(conn, now_ms)
        _check_approval(conn, storage.genesis, code, cert, now_ms)
        conn.execute("UPDATE enrolment_requests SET certificate = ? WHERE code = ?",
                     (orjson.dumps(dict(cert.document)).decode(), code))

    await storage.write(fn)
