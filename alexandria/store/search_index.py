"""The catalogue's indexes, maintained inside the admission transaction.

``LedgerStorage`` runs ``ensure`` when it opens a database and ``on_admitted`` for every admitted
contribution, in the same write transaction as the admission itself, so the catalogue never
shows a state the ledger does not hold and a crash never leaves the two apart.

Tables (all derived, rebuilt from the ledger by ``rebuild`` when absent or when the index
version changes — e.g. a Python whose Unicode tables differ, since normalisation decides what
the full-text index holds):

- ``catalogue``: one row per non-vote object, keyed by its *head* revision's sequence (a
  revision replaces its object's row), with kind, author, the evidence ``method`` or assessment
  ``verdict`` as ``facet``, and the host-projected vote ``score``;
- ``catalogue_counts``: how many heads each (kind, facet, author) holds, so ``total`` is a few
  lookups rather than a count;
- the full-text index, on SQLite: ``catalogue_text``, a contentless FTS5 index of the heads'
  normalised title and human text, rowid = head sequence; ``catalogue_terms`` exposes its term
  instances and ``catalogue_vocab`` each term's document and occurrence counts;
  ``catalogue_words`` keeps the indexed words of each head (what the index needs to forget it,
  and what relevance counts in when a query's candidates are fewer than its words'
  occurrences); ``catalogue_levels`` indexes each head's distinct words as ``word·score``
  tokens, so one word's heads can be read score level by score level, best first, without
  scoring them all, and several words' relevance summed level by level without reading the
  heads' words. On PostgreSQL: ``catalogue_levels`` alone, one row per head under a GIN index
  (``postgresql/postings``), which forgets a head by its sequence;
- ``vote_values``: every vote object's current value; ``vote_totals``: per actor, the votes
  received on their objects and the number of current votes they cast.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from alexandria.core.leaf import record_sql
from alexandria.core.records import Record
from alexandria.core.search_text import IndexText, levels, text_of
from alexandria.rules.view import Verdict
from alexandria.store.postgresql import is_postgresql, postings
from alexandria.store.schema import (
    fill_derived_table,
    object_row,
    revision_id,
)

INDEX_VERSION = f"catalogue/4 unicode/{unicodedata.unidata_version}"
LISTED_KINDS = (
    "space", "discussion", "claim", "document", "evidence", "assessment", "relationship",
    "proposal", "reply",
)

#: revisions a rebuild reads at once
REBUILD_PAGE = 2000
#: ``vote_values``' columns, in the order its rows are written
VOTE_VALUES = "vote_root, author_id, target, value, head_sequence, target_seq, head, target_root"

_DERIVED = (
    "catalogue_actors", "catalogue", "catalogue_counts", "vote_values",
    "vote_totals", "object_scores",
)


def ensure(conn: sqlite3.Connection) -> None:
    """Rebuild the catalogue's tables from the ledger when they were never filled or are
    stale (``INDEX_VERSION`` changed)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'catalogue_index'").fetchone()
    if row is not None and row[0] == INDEX_VERSION:
        return
    rebuild(conn)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('catalogue_index', ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (INDEX_VERSION,),
    )


def rebuild(conn: sqlite3.Connection) -> None:
    """Derive every catalogue table again from the stored revisions, in admission order."""
    for table in _DERIVED:
        conn.execute(f"DELETE FROM {table}")
    if is_postgresql(conn):
        postings.clear(conn)
        # actor ids from 1 again, as SQLite's rowids restart in an emptied table
        conn.execute("ALTER TABLE catalogue_actors ALTER COLUMN id RESTART WITH 1")
    else:
        conn.execute("INSERT INTO catalogue_text(catalogue_text) VALUES ('delete-all')")
        conn.execute("INSERT INTO catalogue_levels(catalogue_levels) VALUES ('delete-all')")
        conn.execute("DELETE FROM catalogue_words")
    replay = _Replay()
    after = 0
    while True:  # a page of revisions at a time: a driver may fetch a statement's rows whole
        # a vote's target's objects row comes with it (its link's ``target_owner``); the
        # links are bounded as the revisions are, or a merge join would read them from the
        # first at every page
        rows = conn.execute(
            f"SELECT r.sequence, r.id, r.root, {record_sql('l.leaf', 'r.record_length')},"
            " o.created_sequence, o.root, o.head_sequence, o.author"
            " FROM revisions r JOIN log l ON l.sequence = r.sequence"
            " LEFT JOIN links k ON r.kind = 'vote' AND k.source_sequence = r.sequence"
            " AND k.position = 0 AND k.source_sequence > ?"
            " LEFT JOIN objects o ON o.created_sequence = k.target_owner"
            " WHERE r.sequence > ? ORDER BY r.sequence LIMIT ?",
            (after, after, REBUILD_PAGE),
        ).fetchall()
        for sequence, rev_id, root, data, *target_row in rows:
            record = orjson.loads(data)
            target = record["links"][0]["target"] if record["kind"] == "vote" else ""
            replay.target = tuple(target_row)
            _admit(conn, record, rev_id, root, record["previous"], target, sequence,
                   replay=replay, actors=replay.actors)
        if replay.forgotten:  # PostgreSQL: the page's replaced heads, one statement a table
            for table in ("catalogue_levels", "catalogue"):
                conn.execute(f"DELETE FROM {table} WHERE seq IN (SELECT sequence FROM revisions"
                             " WHERE id = ANY(?))", (replay.forgotten,))
            replay.forgotten.clear()
        if len(rows) < REBUILD_PAGE:
            break
        after = rows[-1][0]
    _write_replayed(conn, replay)
    # scores last: during the replay ``objects`` already names each target's final head
    conn.execute(
        "UPDATE catalogue SET score = t.score FROM (SELECT o.head_sequence AS seq,"
        " sum(v.value) AS score FROM vote_values v JOIN revisions f"
        f" ON {revision_id('v.target', 'f.id')}"
        " JOIN objects o ON o.created_sequence = f.sequence"
        " GROUP BY o.head_sequence) AS t WHERE catalogue.seq = t.seq"
    )
    fill_derived_table(conn, "object_scores")


def on_admitted(
    conn: sqlite3.Connection, record: Record, v: Verdict, sequence: int,
    actors: dict[str, int] | None = None, text: IndexText | None = None,
) -> None:
    """Called by storage for each admitted contribution, inside the admission transaction.
    ``actors``: the writer's memory of catalogue actor ids (see ``writer_memory``); ``text``:
    the record's ``index_text`` when it was computed beforehand."""
    _admit(conn, record.raw, v.id, v.root, v.previous, v.vote_target, sequence,
           record.decoded_body, actors=actors, text=text)


def actor_id(
    conn: sqlite3.Connection, actor: str, create: bool = False,
    actors: dict[str, int] | None = None,
) -> int | None:
    if actors is not None:
        known = actors.get(actor)
        if known is not None:
            return known
        found = actor_id(conn, actor, create)
        if found is not None:
            actors[actor] = found
        return found
    row = conn.execute("SELECT id FROM catalogue_actors WHERE actor = ?", (actor,)).fetchone()
    if row is not None:
        return int(row[0])
    if not create:
        return None
    row = conn.execute(
        "INSERT INTO catalogue_actors(actor) VALUES (?) RETURNING id", (actor,)
    ).fetchone()
    return int(row[0])


def facet_of(kind: str, decoded: Any) -> str | None:
    if kind == "evidence":
        return f"method:{decoded['method']}"
    if kind == "assessment":
        return f"verdict:{decoded['verdict']}"
    return None


def padded(words: str) -> str:
    """Stored words: `` w1  w2 `` — each word between its own two spaces, so that counting
    `` word `` occurrences never overlaps two neighbours."""
    return f" {'  '.join(words.split())} "


def unpadded(stored: str) -> str:
    return " ".join(stored.split())


@dataclass
class _Replay:
    """What a rebuild knows without asking the database, which on PostgreSQL would cost a
    round trip each (it emptied the tables first, and nothing else writes them meanwhile).
    The votes' rows and the heads' counts are written at its end: updating a row per revised
    vote instead costs PostgreSQL more than the rows' memory saves, and a row updated many
    times in one transaction costs PostgreSQL more at each update (each of its versions is
    kept, and a lookup walks them)."""

    #: actor → the catalogue id it was given
    actors: dict[str, int] = field(default_factory=dict)
    #: vote root → its ``vote_values`` row so far (``VOTE_VALUES``)
    votes: dict[str, list[Any]] = field(default_factory=dict)
    #: actor id → its ``vote_totals`` counters so far (``_TOTALS``)
    totals: dict[int, list[int]] = field(default_factory=dict)
    #: the ``objects`` row (created_sequence, root, head_sequence, author) of the target of
    #: the vote being replayed
    target: tuple[Any, ...] = ()
    #: on PostgreSQL, the revisions of this page that a later one replaced as head
    forgotten: list[str] = field(default_factory=list)
    #: (kind, facet, author id) → its ``catalogue_counts`` so far
    counts: Counter[tuple[str, str, int]] = field(default_factory=Counter)


def _admit(
    conn: sqlite3.Connection, record: Any, rev_id: str, root: str, previous: str,
    vote_target: str, sequence: int, decoded: Any = None, replay: _Replay | None = None,
    actors: dict[str, int] | None = None, text: IndexText | None = None,
) -> None:
    kind: str = record["kind"]
    author = actor_id(conn, record["author"], create=True, actors=actors)
    assert author is not None
    if kind == "vote":
        _vote(conn, author, root, vote_target, int(record["body"]), sequence, rev_id, replay,
              actors)
        return
    body: str = record["body"]
    if decoded is None and kind != "reply":
        decoded = orjson.loads(body)
    if text is None:
        text = text_of(kind, record["title"], body, decoded)
    score = 0
    if previous:
        score = _forget_head(conn, previous, replay)
    facet = facet_of(kind, decoded)
    conn.execute(
        "INSERT INTO catalogue(seq, kind, author_id, facet, score) VALUES (?, ?, ?, ?, ?)",
        (sequence, kind, author, facet, score),
    )
    _index_text(conn, sequence, text)
    if not previous:  # a revision keeps its kind, author and (immutable kinds) facet
        keys = [(kind, "", 0), (kind, "", author)]
        if facet is not None:
            keys += [(kind, facet, 0), (kind, facet, author)]
        if replay is not None:  # summed in memory, written at the replay's end
            replay.counts.update(keys)
        else:
            # an additive upsert (``n`` plus the row's): PostgreSQL's writer sends a batch's
            # counts as one statement, the rows of one key summed (``postgresql/connection``)
            conn.executemany(
                "INSERT INTO catalogue_counts(kind, facet, author_id, n) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(kind, facet, author_id) DO UPDATE SET n = catalogue_counts.n"
                " + excluded.n",
                [(*key, 1) for key in keys],
            )


def _index_text(conn: sqlite3.Connection, sequence: int, text: IndexText) -> None:
    """Index a head's words: FTS5 and the words themselves on SQLite, ``catalogue_levels`` on
    PostgreSQL."""
    if is_postgresql(conn):
        postings.add(conn, sequence, text.levels)
        return
    conn.execute(
        "INSERT INTO catalogue_text(rowid, title, body) VALUES (?, ?, ?)",
        (sequence, text.title, text.text),
    )
    conn.execute(
        "INSERT INTO catalogue_levels(rowid, levels) VALUES (?, ?)",
        (sequence, text.levels),
    )
    conn.execute(
        "INSERT INTO catalogue_words(seq, title, body) VALUES (?, ?, ?)",
        (sequence, padded(text.title), padded(text.text)),
    )


def _forget_head(conn: sqlite3.Connection, previous: str, replay: _Replay | None) -> int:
    """Take the head ``previous`` out of the catalogue and its full-text index; its score (0
    when it was not listed; always 0 in a replay, which scores the heads at its end)."""
    if is_postgresql(conn) and replay is not None:  # forgotten at the page's end, unread
        replay.forgotten.append(previous)
        return 0
    where = f"WHERE {revision_id('?', 'r.id')}"
    if is_postgresql(conn):  # its levels go by its sequence alone
        old = conn.execute(
            f"SELECT c.seq, c.score FROM revisions r JOIN catalogue c ON c.seq = r.sequence"
            f" {where}",
            (previous, previous),
        ).fetchone()
        if old is None:
            return 0
        postings.forget(conn, old[0])
    else:
        old = conn.execute(
            "SELECT c.seq, c.score, w.title, w.body FROM revisions r"
            " JOIN catalogue c ON c.seq = r.sequence JOIN catalogue_words w ON w.seq = c.seq"
            f" {where}",
            (previous, previous),
        ).fetchone()
        if old is None:
            return 0
        title, text = unpadded(old[2]), unpadded(old[3])
        # a contentless index forgets a row given exactly the values it indexed
        conn.execute(
            "INSERT INTO catalogue_text(catalogue_text, rowid, title, body)"
            " VALUES ('delete', ?, ?, ?)",
            (old[0], title, text),
        )
        conn.execute(
            "INSERT INTO catalogue_levels(catalogue_levels, rowid, levels)"
            " VALUES ('delete', ?, ?)",
            (old[0], levels(title, text)),
        )
        conn.execute("DELETE FROM catalogue_words WHERE seq = ?", (old[0],))
    conn.execute("DELETE FROM catalogue WHERE seq = ?", (old[0],))
    return int(old[1])


_TALLY = {1: "up", -1: "down", 0: "neutral"}
#: ``vote_totals``' counters, in ``_tally``'s order
_TOTALS = ("score", "up", "down", "neutral", "cast_votes")


def _tally(value: int, old_value: int | None) -> list[int]:
    """What a vote of ``value`` (which was ``old_value``, None for a new vote) adds to its
    target's owner's ``vote_totals`` (``_TOTALS``, ``cast_votes`` 0: the voter's)."""
    changes = {"score": value - (old_value or 0), "up": 0, "down": 0, "neutral": 0,
               "cast_votes": 0}
    changes[_TALLY[value]] += 1
    if old_value is not None:
        changes[_TALLY[old_value]] -= 1
    return list(changes.values())


def _vote(
    conn: sqlite3.Connection, author: int, vote_root: str, target: str, value: int,
    sequence: int, head: str, replay: _Replay | None, actors: dict[str, int] | None = None,
) -> None:
    """Record the vote ``vote_root``'s value as of its revision ``head`` (admitted at
    ``sequence``), and the scores it changes; a replay keeps them in memory (``_Replay``)."""
    if replay is not None:
        _replay_vote(conn, replay, author, vote_root, target, value, sequence, head)
        return
    old = conn.execute(
        "SELECT value FROM vote_values WHERE vote_root = ?", (vote_root,)
    ).fetchone()
    # the target's row, found once by its root: its integer key goes into vote_values (the
    # scores page reaches the row by it), its head's catalogue row takes the score
    target_seq, target_root, head_sequence, owner_actor = conn.execute(
        "SELECT created_sequence, root, head_sequence, author FROM objects"
        f" WHERE {object_row('?')}", (target, target)
    ).fetchone()
    conn.execute(
        f"INSERT INTO vote_values({VOTE_VALUES}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(vote_root) DO UPDATE SET value = excluded.value,"
        " head_sequence = excluded.head_sequence, head = excluded.head",
        (vote_root, author, target, value, sequence, target_seq, head, target_root),
    )
    old_value = None if old is None else int(old[0])
    delta = value - (old_value or 0)
    # a vote that changes no score (a neutral one, a value voted again) changes no row:
    # SQLite rewrites a row and its entry in every index naming the column it sets, even to
    # the same value (the four score indexes: ~6 pages per vote at 1,000,000 entries)
    if delta:
        conn.execute(
            "UPDATE catalogue SET score = score + ? WHERE seq = ?", (delta, head_sequence)
        )
    conn.execute(
        "INSERT INTO object_scores(created_sequence, score) VALUES (?, ?)"
        " ON CONFLICT(created_sequence) DO UPDATE"
        " SET score = object_scores.score + excluded.score WHERE excluded.score != 0",
        (target_seq, delta),
    )
    owner = actor_id(conn, owner_actor, create=True, actors=actors)
    conn.execute("INSERT OR IGNORE INTO vote_totals(author_id) VALUES (?)", (owner,))
    conn.execute(
        "UPDATE vote_totals SET score = score + ?, up = up + ?, down = down + ?,"
        " neutral = neutral + ? WHERE author_id = ?",
        (*_tally(value, old_value)[:4], owner),
    )
    if old is None:
        conn.execute("INSERT OR IGNORE INTO vote_totals(author_id) VALUES (?)", (author,))
        conn.execute(
            "UPDATE vote_totals SET cast_votes = cast_votes + 1 WHERE author_id = ?", (author,)
        )


def _replay_vote(
    conn: sqlite3.Connection, replay: _Replay, author: int, vote_root: str, target: str,
    value: int, sequence: int, head: str,
) -> None:
    """``_vote`` in a replay: the vote's row and the totals it changes are kept in memory
    (``_write_replayed`` writes them at the replay's end; the scores are summed from the rows)."""
    target_seq, target_root, _head_sequence, owner_actor = replay.target
    row = replay.votes.get(vote_root)
    old_value = None if row is None else int(row[3])
    if row is None:
        row = [vote_root, author, target, value, sequence, target_seq, head, target_root]
        replay.votes[vote_root] = row
    else:  # as the live upsert: the value and the head change, the rest is the first's
        row[3] = value
        row[4] = sequence
        row[6] = head
    owner = actor_id(conn, owner_actor, create=True, actors=replay.actors)
    assert owner is not None
    totals = replay.totals.setdefault(owner, [0] * len(_TOTALS))
    for i, change in enumerate(_tally(value, old_value)):
        totals[i] += change
    if old_value is None:
        replay.totals.setdefault(author, [0] * len(_TOTALS))[-1] += 1


def _write_replayed(conn: sqlite3.Connection, replay: _Replay) -> None:
    """The rows a replay kept in memory: the heads' counts, the votes' rows and totals."""
    conn.executemany(
        "INSERT INTO catalogue_counts(kind, facet, author_id, n) VALUES (?, ?, ?, ?)",
        ((*key, n) for key, n in replay.counts.items()),
    )
    conn.executemany(
        f"INSERT INTO vote_values({VOTE_VALUES}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        replay.votes.values(),
    )
    conn.executemany(
        f"INSERT INTO vote_totals(author_id, {', '.join(_TOTALS)}) VALUES (?, ?, ?, ?, ?, ?)",
        ([actor, *totals] for actor, totals in replay.totals.items()),
    )
