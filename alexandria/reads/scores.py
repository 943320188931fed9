"""``/api/scores?author=``: the host's projection of votes, for one actor (docs/read-api.md).

A vote object's current value is its head's body (-1, 0 or 1); an object's score is the sum of
the current values of every vote on it, across the object's revisions.  ``received`` totals the
votes on the objects ``author`` created; ``votes`` lists the votes ``author`` currently holds,
most recently cast or changed first, each with the target's current score.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from alexandria.reads.catalogue import PAGE_SIZE, Warm
from alexandria.store import read_sql
from alexandria.store.search_index import actor_id


def _read_ahead(conn: sqlite3.Connection, aid: int, offset: int, warm: Warm) -> None:
    """The page's targets' scores sit on pages scattered over ``object_scores``: read them
    several at once (``catalogue.Warm``); the votes themselves, with their head ids and
    targets' roots, come from one range of the covering index ``vote_values_page``."""
    rows = conn.execute(
        f"SELECT target_seq FROM vote_values{read_sql.indexed_by(conn, 'vote_values_page')}"
        " WHERE author_id = ? ORDER BY head_sequence DESC LIMIT ? OFFSET ?",
        (aid, PAGE_SIZE, offset),
    ).fetchall()
    warm("object_scores", list(dict.fromkeys(r[0] for r in rows)))


def scores(
    conn: sqlite3.Connection, author: str, offset: int, warm: Warm | None = None
) -> dict[str, Any]:
    received = {"score": 0, "up": 0, "down": 0, "neutral": 0}
    votes: list[dict[str, Any]] = []
    total = 0
    aid = actor_id(conn, author)
    if aid is not None:
        row = conn.execute(
            "SELECT score, up, down, neutral, cast_votes FROM vote_totals WHERE author_id = ?",
            (aid,),
        ).fetchone()
        if row is not None:
            received = dict(zip(("score", "up", "down", "neutral"), row[:4], strict=True))
            total = int(row[4])
        if warm is not None and offset < total:
            _read_ahead(conn, aid, offset, warm)
        # each vote: one range of the covering index, then its target's score by the
        # target's integer key (one row of object_scores)
        rows = conn.execute(
            "SELECT v.vote_root, v.target_root, v.value, v.head, s.score"
            f" FROM vote_values v{read_sql.indexed_by(conn, 'vote_values_page')}"
            " LEFT JOIN object_scores s ON s.created_sequence = v.target_seq"
            " WHERE v.author_id = ? ORDER BY v.head_sequence DESC LIMIT ? OFFSET ?",
            (aid, PAGE_SIZE, offset),
        ).fetchall()
        votes = [
            {"target": target, "value": value, "vote": head, "vote_root": root,
             "target_score": target_score or 0}
            for root, target, value, head, target_score in rows
        ]
    end = offset + len(votes)
    return {
        "author": author,
        "received": received,
        "votes": votes,
        "votes_total": total,
        "next_offset": end if end < total else None,
    }
