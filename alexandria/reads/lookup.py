"""Finding anything by its id or a prefix of it: a revision, an object (its root, which is its
first revision's id), an actor (an author's key) or an authority key.

Every id a page prints is a prefix of a 64-hex value (``9d272d703754``); a reader pasting one
gets what it names.  Each kind is one bounded range read of an index that already exists, on
both backends, so a lookup costs a few page reads at any size:

- revisions and objects: ``revisions_id`` (SQLite: the index of ``substr(id, 1, 16)``; the
  condition repeats the expression so SQLite's planner takes it) and the ``UNIQUE`` index of
  whole ids (PostgreSQL, ``COLLATE "C"``: the condition on ``id`` is its range);
- actors: ``catalogue_actors``' ``UNIQUE`` index of actors (every author and voter);
- keys: ``authorities_key`` (keys the authority documents certified).

The prefix is validated first (``parse_prefix``), so the range bounds are plain hex and ``g``
(the character after ``f``): ids in ``[prefix, prefix + "g")`` are exactly those it begins.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from alexandria.errors import Conflict, Malformed, NotFound

#: The shortest prefix looked up: 32 bits, so that a prefix printed by a page names one thing in
#: all but enormous libraries, and a range read stays small.
MIN_PREFIX = 8
#: Candidates an ambiguous prefix lists at most (per kind, then in all).
MAX_CANDIDATES = 20
_PREFIX = re.compile(r"[0-9a-f]{8,64}")
#: The kinds of things, in the order a full id that is several of them is reported.
KINDS = ("object", "revision", "actor", "key")


class AmbiguousId(Conflict):
    """A prefix several things begin with; ``details.candidates`` lists them."""

    default_code = "AMBIGUOUS_ID"


@dataclass(frozen=True)
class Found:
    kind: str  # one of KINDS
    id: str  # the full 64-hex id
    url: str  # the page that shows it
    entry: int | None = None  # the log entry that admitted it (a revision, an object, a key)
    title: str | None = None  # a revision's or object's title
    root: str | None = None  # a revision's object

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "id": self.id, "url": self.url}
        for name in ("entry", "title", "root"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def is_prefix(value: str) -> bool:
    """Whether ``value`` has the form of an id or a prefix of one that is looked up."""
    return _PREFIX.fullmatch(value) is not None


def parse_prefix(value: str, parameter: str = "id") -> str:
    if not is_prefix(value):
        raise Malformed(
            f"an id is 64 lowercase hex characters, or its first {MIN_PREFIX} or more",
            "BAD_ID", parameter=parameter, value=value[:100], minimum=MIN_PREFIX,
        )
    return value


def _bounds(prefix: str) -> tuple[str, str]:
    return prefix, prefix + "g"


def candidates(conn: sqlite3.Connection, prefix: str,
               kinds: tuple[str, ...] = KINDS) -> tuple[list[Found], bool]:
    """Everything ``prefix`` (validated) begins the id of, at most ``MAX_CANDIDATES``, and
    whether there were more.  A revision that is its object's first is reported as the object
    (its page is the object's, and its id the object's address)."""
    lo, hi = _bounds(prefix)
    lo16, hi16 = _bounds(prefix[:16])
    out: list[Found] = []
    more = False
    limit = MAX_CANDIDATES + 1
    if "object" in kinds or "revision" in kinds:
        rows = conn.execute(
            "SELECT id, root, sequence, title FROM revisions"
            " WHERE substr(id, 1, 16) >= ? AND substr(id, 1, 16) < ? AND id >= ? AND id < ?"
            " ORDER BY substr(id, 1, 16) LIMIT ?",
            (lo16, hi16, lo, hi, limit),
        ).fetchall()
        more = more or len(rows) == limit
        for rev, root, seq, title in rows[:MAX_CANDIDATES]:
            if rev == root and "object" in kinds:
                out.append(Found("object", rev, f"/objects/{rev}", int(seq), title, rev))
            elif "revision" in kinds:
                out.append(Found("revision", rev, f"/revisions/{rev}", int(seq), title, root))
    if "actor" in kinds:
        rows = conn.execute(
            "SELECT actor FROM catalogue_actors WHERE actor >= ? AND actor < ?"
            " ORDER BY actor LIMIT ?", (lo, hi, limit),
        ).fetchall()
        more = more or len(rows) == limit
        out.extend(Found("actor", a, f"/authors/{a}") for (a,) in rows[:MAX_CANDIDATES])
    if "key" in kinds:
        rows = conn.execute(
            "SELECT key, min(sequence) FROM authorities WHERE key >= ? AND key < ?"
            " GROUP BY key ORDER BY key LIMIT ?", (lo, hi, limit),
        ).fetchall()
        more = more or len(rows) == limit
        out.extend(Found("key", k, f"/log?entry={int(seq)}", int(seq))
                   for k, seq in rows[:MAX_CANDIDATES])
    if len(out) > MAX_CANDIDATES:
        out, more = out[:MAX_CANDIDATES], True
    return out, more


def resolve(conn: sqlite3.Connection, prefix: str,
            kinds: tuple[str, ...] = KINDS) -> Found:
    """The one thing ``prefix`` (validated) names: unknown → ``NotFound`` (404), several →
    ``AmbiguousId`` (409) with the candidates.  One full id naming several kinds of thing (an
    author who is also a certified key) is one thing: the first of ``KINDS`` it is."""
    found, more = candidates(conn, prefix, kinds)
    if not found:
        raise NotFound(f"nothing has an id beginning {prefix}", "UNKNOWN_ID", id=prefix,
                       kinds=list(kinds))
    if len({f.id for f in found}) == 1 and not more:
        return found[0]
    raise AmbiguousId(
        f"{'more than ' if more else ''}{len(found)} ids begin with {prefix}: give more of it",
        id=prefix, candidates=[f.to_json() for f in found], truncated=more,
    )
