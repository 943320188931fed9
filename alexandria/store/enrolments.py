"""Enrolment requests in their own table (``enrolment_requests``, ``store/schema.py``), never in
the log: the policy is ``service/enrolment.py``; this module is its SQL.

Writes run in the store's group-commit writer (``storage.write``), so the count of open
requests, the single use of a code and the certificate's checks against the ledger's
authorities are decided inside one transaction.  Expired rows are deleted whenever a request
is made or approved.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from alexandria.core.trust import WorkerCertificate
from alexandria.errors import Conflict, Forbidden, NotFound, RateLimited
from alexandria.store.ledger_storage import LedgerStorage

_COLUMNS = "code, worker, name, scopes, requested_ms, expires_ms, certificate"


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    code, worker, name, scopes, requested, expires, certificate = values
    return {"code": code, "worker": worker, "name": name, "scopes": scopes.split(),
            "requested_ms": requested, "expires_ms": expires,
            "certificate": orjson.loads(certificate) if certificate else None}


def _expire(conn: sqlite3.Connection, now_ms: int) -> None:
    conn.execute("DELETE FROM enrolment_requests WHERE expires_ms < ?", (now_ms,))


async def create(storage: LedgerStorage, code: str, worker: str, name: str,
                 scopes: tuple[str, ...], now_ms: int, ttl_ms: int, max_open: int) -> int:
    """Store a new request; its expiry.  A worker key has one open request: asking again
    replaces it (a new code).  Raises ``RateLimited`` when ``max_open`` are open."""
    def fn(conn: sqlite3.Connection) -> int:
        _expire(conn, now_ms)
        conn.execute("DELETE FROM enrolment_requests WHERE worker = ? AND certificate IS NULL",
                     (worker,))
        (count,) = conn.execute("SELECT count(*) FROM enrolment_requests").fetchone()
        if count >= max_open:
            raise RateLimited("too many open enrolment requests: try again later",
                              limit=max_open)
        conn.execute(
            f"INSERT INTO enrolment_requests({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (code, worker, name, " ".join(scopes), now_ms, now_ms + ttl_ms),
        )
        return now_ms + ttl_ms

    return await storage.write(fn)


async def get(storage: LedgerStorage, code: str, now_ms: int) -> dict[str, Any] | None:
    def fn(conn: sqlite3.Connection) -> dict[str, Any] | None:
        row = conn.execute(f"SELECT {_COLUMNS} FROM enrolment_requests WHERE code = ?"
                           " AND expires_ms >= ?", (code, now_ms)).fetchone()
        return _row(row) if row else None

    return await storage.read(fn)


def _check_authority(storage: LedgerStorage, conn: sqlite3.Connection, key: str,
                     now_ms: int) -> None:
    view = storage.state_view(conn)
    certified = [a for _seq, a in view.authorities(key)
                 if "native-application" in a.roles and a.valid_at(now_ms)]
    if not certified or view.revoked(key, None):
        raise Forbidden("not a certified, unrevoked native-application authority of this"
                        " library", "AUTHORITY_UNKNOWN", authority=key)


async def open_requests(storage: LedgerStorage, now_ms: int, limit: int, authority: str
                        ) -> list[dict[str, Any]]:
    """Requests not approved yet and not expired, oldest first, for ``authority`` (a key that
    signed the request for them: it must be certified and unrevoked).  In the writer's
    transaction, as ``approve``, for its view of the authorities; operators list rarely."""
    def fn(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        _check_authority(storage, conn, authority, now_ms)
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM enrolment_requests WHERE certificate IS NULL"
            " AND expires_ms >= ? ORDER BY requested_ms, code LIMIT ?", (now_ms, limit))
        return [_row(r) for r in rows]

    return await storage.write(fn)


async def approve(storage: LedgerStorage, code: str, cert: WorkerCertificate, now_ms: int
                  ) -> None:
    """Attach a worker certificate to the open request ``code``: once.  The certificate must be
    for the requesting key, valid now, and issued by a certified, unrevoked native-application
    authority of this ledger."""

    def fn(conn: sqlite3.Connection) -> None:
        _expire(conn, now_ms)
        row = conn.execute("SELECT worker, certificate FROM enrolment_requests WHERE code = ?",
                           (code,)).fetchone()
        if row is None:
            raise NotFound(f"no open enrolment request {code} (expired, or never made)",
                           "UNKNOWN_CODE", enrolment=code)
        worker, existing = row
        if existing is not None:
            raise Conflict(f"enrolment request {code} is already approved: a code approves"
                           " once", "CODE_USED", enrolment=code)
        if cert.worker != worker:
            raise Forbidden("the certificate is for another key than the request's",
                            "CERTIFICATE_KEY_MISMATCH", worker=worker,
                            certificate_worker=cert.worker)
        if not cert.valid_at(now_ms):
            raise Forbidden("the certificate is not valid now", "CERTIFICATE_NOT_VALID")
        _check_authority(storage, conn, cert.authority, now_ms)
        conn.execute("UPDATE enrolment_requests SET certificate = ? WHERE code = ?",
                     (orjson.dumps(dict(cert.document)).decode(), code))

    await storage.write(fn)
