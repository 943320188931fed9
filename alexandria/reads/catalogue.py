"""``/api/catalogue``: which heads a query lists, in which order, and how many there are.

Every answer comes from the indexes of ``search_index`` (docs/read-api.md):

- no ``q``: ``total`` is a sum of at most nine maintained counters and the page an index range
  (by head sequence, or by score then head sequence) skipping ``offset`` entries;
- with ``q``: a head matches when it holds every distinct query word, its relevance is title
  occurrences × 3 + body occurrences summed over the words, and ``total`` comes from the same
  pass; relevance is read whichever way reads least: one word's score levels best first, the
  sum of several words' score levels, the index's term instances, or the candidates' stored
  words.

"Newest" is the most recently admitted head (admission order is the host's clock; authored_at
is the author's claim), so a revised object moves to the front.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from alexandria.core.leaf import record_sql
from alexandria.core.records import OBJECT_KINDS
from alexandria.core.search_text import LEVEL_MARK, snippet, words
from alexandria.errors import Malformed
from alexandria.store import read_sql
from alexandria.store.read_ahead import Key
from alexandria.store.search_index import LISTED_KINDS, actor_id

PAGE_SIZE = 50
MAX_QUERY_CHARACTERS = 500
MAX_QUERY_WORDS = 16
SORTS = ("new", "top", "relevance")
PROJECTIONS = ("full", "summary")
VIEWS: dict[str, tuple[str, ...]] = {
    "all": LISTED_KINDS,
    "current": OBJECT_KINDS,
    "feed": ("discussion", "claim", "document", "evidence", "proposal"),
}
METHODS = ("proof", "example", "experiment", "observation", "source", "counterexample")
VERDICTS = ("open", "supported", "disputed", "accepted", "refuted")


@dataclass(frozen=True)
class CatalogueQuery:
    q: str | None = None
    kind: str | None = None
    view: str = "all"
    sort: str = "new"
    offset: int = 0
    author: str | None = None
    method: str | None = None
    verdict: str | None = None
    projection: str = "full"

    def kinds(self) -> tuple[str, ...]:
        """The kinds the view, ``kind``, ``method`` and ``verdict`` leave (possibly none)."""
        kinds = VIEWS[self.view]
        if self.kind is not None:
            kinds = tuple(k for k in kinds if k == self.kind)
        if self.method is not None:
            kinds = tuple(k for k in kinds if k == "evidence")
        if self.verdict is not None:
            kinds = tuple(k for k in kinds if k == "assessment")
        return kinds

    @property
    def facet(self) -> str | None:
        if self.method is not None:
            return f"method:{self.method}"
        if self.verdict is not None:
            return f"verdict:{self.verdict}"
        return None

    def query_words(self) -> list[str]:
        """Distinct normalised words of ``q``, in order of first appearance."""
        assert self.q is not None
        return list(dict.fromkeys(w for token in self.q.split() for w in words(token)))


def check_query(q: str) -> None:
    if len(q) > MAX_QUERY_CHARACTERS:
        raise Malformed(
            f"q is {len(q)} characters; at most {MAX_QUERY_CHARACTERS}", "QUERY_TOO_LONG",
            parameter="q", limit=MAX_QUERY_CHARACTERS, actual=len(q),
        )
    count = len(CatalogueQuery(q=q).query_words())
    if count > MAX_QUERY_WORDS:
        raise Malformed(
            f"q has {count} distinct words; at most {MAX_QUERY_WORDS}", "QUERY_TOO_LONG",
            parameter="q", limit=MAX_QUERY_WORDS, actual=count,
        )


@dataclass(frozen=True)
class Page:
    sequences: list[int]
    total: int


def find(conn: sqlite3.Connection, query: CatalogueQuery, warm: Warm | None = None) -> Page:
    """The head sequences of one page, and how many heads the query matches.  ``warm``: see
    ``Warm`` (without it, every row is read by ``conn`` alone)."""
    kinds = query.kinds()
    if not kinds:
        return Page([], 0)
    author = None
    if query.author is not None:
        author = actor_id(conn, query.author)
        if author is None:
            return Page([], 0)
    if query.q is not None:
        return _search(conn, query, kinds, author, warm)
    total = _count(conn, kinds, query.facet, author)
    if total <= query.offset:
        return Page([], total)
    return Page(_list(conn, query, kinds, author), total)


def _in(values: tuple[str, ...] | list[str]) -> str:
    return ",".join("?" * len(values))


def _count(
    conn: sqlite3.Connection, kinds: tuple[str, ...], facet: str | None, author: int | None
) -> int:
    row = conn.execute(
        f"SELECT coalesce(sum(n), 0) FROM catalogue_counts WHERE kind IN ({_in(kinds)})"
        " AND facet = ? AND author_id = ?",
        (*kinds, facet or "", author or 0),
    ).fetchone()
    return int(row[0])


def _filters(
    kinds: tuple[str, ...], facet: str | None, author: int | None, prefix: str = ""
) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if author is not None:
        where.append(f"{prefix}author_id = ?")
        params.append(author)
    if facet is not None:
        where.append(f"{prefix}facet = ?")
        params.append(facet)
    if set(kinds) != set(LISTED_KINDS):
        where.append(f"{prefix}kind IN ({_in(kinds)})")
        params.extend(kinds)
    return where, params


def _list(
    conn: sqlite3.Connection, query: CatalogueQuery, kinds: tuple[str, ...], author: int | None
) -> list[int]:
    top = query.sort == "top"
    facet = query.facet
    # the index that yields rows in order with the fewest skipped
    if author is not None:
        index = read_sql.indexed_by(conn, "catalogue_author_score" if top else "catalogue_author")
    elif facet is not None:
        index = read_sql.indexed_by(conn, "catalogue_facet_score" if top else "catalogue_facet")
    elif len(kinds) == 1:
        index = read_sql.indexed_by(conn, "catalogue_kind_score" if top else "catalogue_kind")
    else:
        index = (read_sql.indexed_by(conn, "catalogue_score") if top
                 else read_sql.not_indexed(conn))
    where, params = _filters(kinds, facet, author)
    order = "score DESC, seq DESC" if top else "seq DESC"
    sql = (
        f"SELECT seq FROM catalogue{index}"
        f"{' WHERE ' + ' AND '.join(where) if where else ''}"
        f" ORDER BY {order} LIMIT ? OFFSET ?"
    )
    return [r[0] for r in conn.execute(sql, (*params, PAGE_SIZE, query.offset))]


def _search(
    conn: sqlite3.Connection, query: CatalogueQuery, kinds: tuple[str, ...], author: int | None,
    warm: Warm | None = None,
) -> Page:
    ws = query.query_words()
    if not ws:
        return Page([], 0)
    where, params = _filters(kinds, query.facet, author, "c.")
    join = " JOIN catalogue c ON c.seq = h.seq" if where or query.sort == "top" else ""
    order = {
        "relevance": "h.score DESC, h.seq DESC",
        "new": "h.seq DESC",
        "top": "c.score DESC, h.seq DESC",
    }[query.sort]
    if query.sort == "relevance" and len(ws) == 1 and not where:  # best levels first
        found = read_sql.relevance_page(conn, ws[0], query.offset, PAGE_SIZE)  # PostgreSQL's
        if found is not None:
            return Page(*found)
        if LEVELS:
            return _levels(conn, ws[0], query.offset)
    hits = read_sql.posting_hits(conn, ws)  # PostgreSQL's GIN of levels; else FTS5's
    if hits is None:
        hits = _fts_hits(conn, ws, query.sort == "relevance", warm)
        if hits is None:
            return Page([], 0)
    tail = f"FROM h{join}{' WHERE ' + ' AND '.join(where) if where else ''}"
    rows = conn.execute(
        f"{hits[0]} SELECT h.seq, count(*) OVER () {tail} ORDER BY {order} LIMIT ? OFFSET ?",
        (*hits[1:], *params, PAGE_SIZE, query.offset),
    ).fetchall()
    if rows:
        return Page([r[0] for r in rows], int(rows[0][1]))
    if query.offset == 0:
        return Page([], 0)
    total = conn.execute(f"{hits[0]} SELECT count(*) {tail}", (*hits[1:], *params)).fetchone()
    return Page([], int(total[0]))


def _fts_hits(conn: sqlite3.Connection, ws: list[str], relevance: bool, warm: Warm | None,
              ) -> tuple[Any, ...] | None:
    """SQLite's ``h`` CTE of the heads holding every word of ``ws`` and its parameters, with
    their relevance if asked (None: no head holds them all)."""
    if relevance:
        return _relevance(conn, ws, warm)
    # membership only: the full-text index intersects the words' document lists
    return (
        "WITH h(seq) AS (SELECT rowid FROM catalogue_text WHERE catalogue_text MATCH ?)",
        " AND ".join(f'"{w}"' for w in ws),
    )


# Relevance is counted one of two ways, whichever reads less: from the index's term instances
# (work ∝ every occurrence of the query's words in the catalogue), or in the stored words of the
# heads that hold every query word (work ∝ those candidates × their length, one row each of
# ``catalogue_words``, read ahead several at once).  A candidate costs about as much as this
# many term instances.
CANDIDATE_COST = 12

#: Reads a page of rows of a table several at once before they are used (``ReadAhead``): the
#: handler passes the storage's, so that scattered rows wait for the disk once, not one by one.
Warm = Callable[[str, Sequence[Key]], None]


def _heads_holding(conn: sqlite3.Connection, ws: list[str], bound: int = -1) -> int:
    """How many heads hold every word of ``ws`` (at most ``bound`` when it is not negative):
    the full-text index intersects the words' document lists, skipping through the longer
    ones, so a common word beside a rare one costs little (unlike ``catalogue_vocab``, which
    reads every position of every word)."""
    row = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM catalogue_text WHERE catalogue_text MATCH ?"
        " LIMIT ?)",
        (" AND ".join(f'"{w}"' for w in ws), bound),
    ).fetchone()
    return int(row[0])


def _relevance(
    conn: sqlite3.Connection, ws: list[str], warm: Warm | None = None
) -> tuple[Any, ...] | None:
    """The ``h(seq, score)`` CTE and its parameters; None when no head holds every word."""
    if len(ws) > 1 and LEVEL_ANCHOR_MAX > 0:
        held = [_heads_holding(conn, [w], LEVEL_ANCHOR_MAX + 1) for w in ws]
        if min(held) == 0:
            return None
        if min(held) <= LEVEL_ANCHOR_MAX:
            return _combined_levels(conn, ws, held.index(min(held)))
    candidates = _heads_holding(conn, ws)
    if candidates == 0:
        return None
    # each word's heads (a lower bound of its occurrences), counted only as far as decides
    budget = candidates * CANDIDATE_COST
    occurrences = candidates
    if len(ws) > 1:
        occurrences = 0
        for w in ws:
            occurrences += _heads_holding(conn, [w], budget - occurrences + 1)
            if occurrences > budget:
                break
    if budget >= occurrences:
        return (
            "WITH h(seq, score) AS (SELECT doc, sum(CASE col WHEN 'title' THEN 3 ELSE 1 END)"
            f" FROM catalogue_terms WHERE term IN ({_in(ws)}) GROUP BY doc"
            " HAVING count(DISTINCT term) = ?)",
            *ws, len(ws),
        )
    # stored words sit each between its own two spaces (``search_index.padded``)
    terms: list[str] = []
    params: list[Any] = [" AND ".join(f'"{w}"' for w in ws)]
    for column, weight in (("title", 3), ("body", 1)):
        for word in ws:
            terms.append(
                f"{weight} * ((length(w.{column}) - length(replace(w.{column}, ?, ''))) / ?)"
            )
            params += [f" {word} ", len(word) + 2]
    # the count parameters come before MATCH's in the statement
    params = params[1:] + params[:1]
    if warm is not None:
        warm("catalogue_words", [r[0] for r in conn.execute(
            "SELECT rowid FROM catalogue_text WHERE catalogue_text MATCH ?", params[-1:]
        )])
    return (
        f"WITH h(seq, score) AS (SELECT t.rowid, {' + '.join(terms)} FROM catalogue_text t"
        " JOIN catalogue_words w ON w.seq = t.rowid WHERE catalogue_text MATCH ?)",
        *params,
    )


# One word, no filter: read the word's score levels best first (``search_text.levels``).
LEVELS = True
# Several words: sum their score levels (``_combined_levels``) when one of them is held by at
# most ``LEVEL_ANCHOR_MAX`` heads (the candidates, kept in memory at once; 0: never).
LEVEL_ANCHOR_MAX = 20_000


def _word_levels(conn: sqlite3.Connection, word: str) -> list[tuple[int, int]]:
    """The score levels of ``word`` (``search_text.levels``): each score some head has for it
    and how many heads have it, best first (the index's term statistics)."""
    prefix = word + LEVEL_MARK
    found = conn.execute(
        "SELECT term, doc FROM catalogue_level_terms WHERE term >= ? AND term < ?",
        (prefix, word + chr(ord(LEVEL_MARK) + 1)),
    ).fetchall()
    return sorted(((int(term[len(prefix):]), docs) for term, docs in found), reverse=True)


def _level(word: str, score: int) -> str:
    """The full-text query of one score level of ``word``: its one token."""
    return f'"{word}{LEVEL_MARK}{score}"'


def _combined_levels(
    conn: sqlite3.Connection, ws: list[str], anchor: int
) -> tuple[Any, ...] | None:
    """Relevance of several words scored from their score levels, without reading the heads:
    a head's relevance for the query is the sum of its scores for each word, and each level
    of a word is one token of ``catalogue_levels``.  The anchor (the word fewest heads hold)
    gives every candidate and its score, a query per level; each other word's levels are each
    intersected with the anchor's tokens, so the index skips through a common word's long
    lists, reading their pages in order (about the pages the term statistics read), instead
    of one scattered ``catalogue_words`` row per candidate.  None when no head holds every
    word."""
    levels = [_word_levels(conn, w) for w in ws]
    scores: dict[int, int] = {}
    for score, _docs in levels[anchor]:
        for (seq,) in conn.execute(
            "SELECT rowid FROM catalogue_levels WHERE catalogue_levels MATCH ?",
            (_level(ws[anchor], score),),
        ):
            scores[seq] = score
    anchored = " OR ".join(_level(ws[anchor], score) for score, _docs in levels[anchor])
    for i, word in enumerate(ws):
        if i == anchor or not scores:
            continue
        found: dict[int, int] = {}
        for score, _docs in levels[i]:
            for (seq,) in conn.execute(
                "SELECT rowid FROM catalogue_levels WHERE catalogue_levels MATCH ?",
                (f"{_level(word, score)} AND ({anchored})",),
            ):
                found[seq] = score
        scores = {seq: total + found[seq] for seq, total in scores.items() if seq in found}
    if not scores:
        return None
    return (
        "WITH h(seq, score) AS (SELECT value ->> 0, value ->> 1 FROM json_each(?))",
        orjson.dumps(list(scores.items())).decode(),
    )


def _levels(conn: sqlite3.Connection, word: str, offset: int) -> Page:
    levels = _word_levels(conn, word)
    total = sum(docs for _score, docs in levels)
    out: list[int] = []
    skip = offset
    for score, docs in levels:
        if skip >= docs:
            skip -= docs
            continue
        out += [r[0] for r in conn.execute(
            "SELECT rowid FROM catalogue_levels WHERE catalogue_levels MATCH ?"
            " ORDER BY rowid DESC LIMIT ? OFFSET ?",
            (_level(word, score), PAGE_SIZE - len(out), skip),
        )]
        skip = 0
        if len(out) >= PAGE_SIZE:
            break
    return Page(out, total)


def summaries(conn: sqlite3.Connection, sequences: list[int]) -> list[dict[str, Any]]:
    """Unsigned discovery hints, in the given order."""
    select = (f"SELECT r.id, r.root, {record_sql('l.leaf', 'r.record_length')}, r.sequence"
              " FROM revisions r JOIN log l ON l.sequence = r.sequence WHERE r.sequence")
    rows: dict[int, Any] = {}
    if read_sql.asks_together(conn) and sequences:  # one statement for the page
        marks = ",".join("?" * len(sequences))
        rows = {int(r[3]): r for r in conn.execute(f"{select} IN ({marks})", sequences)}
    out = []
    for seq in sequences:
        row = rows.get(seq) if rows else conn.execute(f"{select} = ?", (seq,)).fetchone()
        if row is None:
            continue
        rev, root, data, _seq = row
        record = orjson.loads(data)
        out.append(
            {
                "id": rev,
                "root": root,
                "title": record["title"],
                "kind": record["kind"],
                "author": record["author"],
                "authored_at": record["authored_at"],
                "snippet": snippet(record["body"]),
            }
        )
    return out
