"""Personal lists on SQLite: two tables of their own, and one write transaction per request.

Every personal request, reads included, runs in ``storage.write`` (the group-commit writer),
because a read records its nonce and a write compare-and-sets the current state: the checks and
the change are atomic, also with several server processes on one database.  Nothing here touches
the public tables (log, merkle, revisions, objects, links, feed) except to look up list targets.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from alexandria.rules.admission import Candidate
from alexandria.rules.personal import WINDOW_MS, Decision, StoredState, Target, decide
from alexandria.rules.view import StateView
from alexandria.store.schema import revision_id

if TYPE_CHECKING:
    from alexandria.store.interface import Storage

# Rows of personal_requests are needed only while a request can still pass the time window;
# the extra day keeps a server clock that steps back from reopening a pruned nonce.
RETENTION_MS = WINDOW_MS + 24 * 3600 * 1000


class _PersonalView:
    """``personal.PersonalView`` over the writer's connection, inside its transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def target(self, rev: str) -> Target | None:
        row = self.conn.execute(f"SELECT kind, root FROM revisions WHERE {revision_id('?')}",
                                (rev, rev)).fetchone()
        return None if row is None else Target(row[0], row[1])

    def current(self, author: str) -> StoredState | None:
        row = self.conn.execute(
            "SELECT id, signed FROM personal_state WHERE author = ?", (author,)
        ).fetchone()
        return None if row is None else StoredState(row[0], bytes(row[1]))

    def accepted(self, record_id: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM personal_requests WHERE id = ?", (record_id,)
        ).fetchone()
        return row is not None

    def nonce_owner(self, author: str, nonce: str) -> str | None:
        row = self.conn.execute(
            "SELECT id FROM personal_requests WHERE author = ? AND nonce = ?", (author, nonce)
        ).fetchone()
        return None if row is None else str(row[0])


def _apply(conn: sqlite3.Connection, view: StateView, now: int, cand: Candidate) -> Decision:
    conn.execute("DELETE FROM personal_requests WHERE authored_ms < ?", (now - RETENTION_MS,))
    decision = decide(view, _PersonalView(conn), cand, now)
    rec = cand.record
    if decision.remember:
        conn.execute(
            "INSERT INTO personal_requests(id, author, kind, nonce, authored_ms)"
            " VALUES (?, ?, ?, ?, ?)",
            (rec.id, rec.author, rec.kind, decision.nonce, rec.authored_ms),
        )
    if decision.new_state is not None:
        conn.execute(
            "INSERT INTO personal_state(author, id, signed) VALUES (?, ?, ?)"
            " ON CONFLICT(author) DO UPDATE SET id = excluded.id, signed = excluded.signed",
            (rec.author, decision.new_state.id, decision.new_state.signed),
        )
    return decision


async def submit(storage: Storage, cand: Candidate) -> Decision:
    """Decide and persist a personal request in the next write transaction."""
    return await storage.write(
        lambda conn: _apply(conn, storage.state_view(conn), storage.clock(), cand)
    )
