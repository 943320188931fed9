"""The catalogue's full-text index on PostgreSQL: each head's words and their levels, under a
GIN index.

SQLite keeps the heads' words in FTS5 tables (``store/search_index.py``); PostgreSQL keeps one
row per head, ``catalogue_levels(seq, tokens, over)``:

- ``tokens`` is the head's ``IndexText.levels`` (``core/search_text.levels``): each distinct
  word once as ``word·level``, the level being its relevance for a one-word query
  (3 × title occurrences + body occurrences, the contract's weights), with every level of
  ``CAP`` or more written as ``word·CAP``;
- ``over`` holds the exact ``word·level`` of those words (empty for almost every head);
- a GIN index over ``string_to_array(tokens, ' ')`` keeps, for each ``word·level``, the heads
  that hold it, in compressed posting lists that PostgreSQL appends to and merges in bulk.

A query's heads are those holding every one of its distinct words:

- one word: its heads and levels are read level by level (``word·1`` … ``word·CAP``: one index
  probe each), so relevance is known without reading the heads' texts; sorted by relevance
  with no filter, a page reads only the levels it shows (``relevance_page``), after counting
  each level's heads;
- several words: one scan of the index asks for every word at once (an overlap with each
  word's ``CAP`` tokens), so only the heads holding them all are read, however many heads hold
  a common word among them, and each word's level is read from those heads' ``tokens``.

The levels are those the FTS5 path counts, so both backends rank alike.  SQL only; no driver
import.
"""

from __future__ import annotations

import re
from typing import Any

from alexandria.core.search_text import LEVEL_MARK

#: levels at or above this are indexed as ``word·CAP`` (a query probes levels 1 to CAP) and
#: kept exactly in ``over``
CAP = 64
#: a level of 64 or more (``CAP``), found in C before any token is split in Python
_AT_CAP = re.compile(LEVEL_MARK + r"(?:6[4-9]|[7-9][0-9]|[0-9]{3,})(?= |$)")


def columns(levels: str) -> tuple[str, str]:
    """``tokens`` and ``over`` for a head whose ``IndexText.levels`` is ``levels``."""
    if not _AT_CAP.search(levels):
        return levels, ""
    tokens, over = [], []
    for token in levels.split():
        word, _mark, level = token.rpartition(LEVEL_MARK)
        if int(level) >= CAP:
            tokens.append(f"{word}{LEVEL_MARK}{CAP}")
            over.append(token)
        else:
            tokens.append(token)
    return " ".join(tokens), " ".join(over)


def add(conn: Any, seq: int, levels: str) -> None:
    conn.execute(
        "INSERT INTO catalogue_levels(seq, tokens, over) VALUES (?, ?, ?)",
        (seq, *columns(levels)),
    )


def forget(conn: Any, seq: int) -> None:
    conn.execute("DELETE FROM catalogue_levels WHERE seq = ?", (seq,))


def clear(conn: Any) -> None:
    conn.execute("DELETE FROM catalogue_levels")


def _level_in(column: str, needle: str = "CAST(? AS text)") -> str:
    """The digits of a word's level in ``column`` of a head ('' when it does not hold the word):
    what follows ``needle``, `` word·`` (the parameter, by default).  Each word is once in a
    column, between spaces."""
    return f"split_part(split_part(' ' || {column}, {needle}, 2), ' ', 1)"


# One word's heads and levels: a probe of the index per level; a head at CAP reads its
# exact level from ``over``.  Parameters: the word, twice.
_M = LEVEL_MARK
_WORD_MARK = f"' ' || CAST(? AS text) || '{_M}'"  # `` word·`` of the parameter ``word``
_WORD_LEVELS = (
    f"SELECT l.seq, CASE WHEN g.k < {CAP} THEN g.k ELSE"
    f" NULLIF({_level_in('l.over', _WORD_MARK)}, '')::int END"
    f" FROM generate_series(1, {CAP}) AS g(k) CROSS JOIN LATERAL"
    " (SELECT seq, over FROM catalogue_levels"
    f"  WHERE string_to_array(tokens, ' ') @> ARRAY[CAST(? AS text) || '{_M}' || g.k]) AS l"
)


#: a head's level for one word: its token's, or its exact level from ``over`` when that token
#: is at ``CAP`` (``over`` holds only levels of ``CAP`` or more).  Parameters: `` word·``, twice.
_LEVEL = (f"GREATEST({_level_in('tokens')}::int,"
          f" coalesce(NULLIF({_level_in('over')}, '')::int, 0))")
#: the heads holding a word at any level.  Parameter: the word's ``CAP`` tokens (``tokens_of``).
_HOLDS = "string_to_array(tokens, ' ') && CAST(? AS text[])"


def tokens_of(word: str) -> list[str]:
    """Every token the index may hold ``word`` as: ``word·1`` … ``word·CAP``."""
    return [f"{word}{LEVEL_MARK}{k}" for k in range(1, CAP + 1)]


def hits(words: list[str]) -> tuple[Any, ...]:
    """The ``h(seq, score)`` CTE of the heads holding every one of ``words`` (distinct), and
    its parameters (``reads/catalogue._search`` adds filters, order and page)."""
    # MATERIALIZED: the heads are found first, whatever the page's filters and order (the
    # planner would otherwise run the probes for each catalogue row in the order's index)
    if len(words) == 1:  # a head holds a word at one level: nothing to sum
        return f"WITH h(seq, score) AS MATERIALIZED ({_WORD_LEVELS})", words[0], words[0]
    # one index scan intersects the words' heads (GIN skips through a common word's lists
    # beside a rarer one's), and only those heads' rows are read
    return (
        f"WITH h(seq, score) AS MATERIALIZED (SELECT seq, {' + '.join([_LEVEL] * len(words))}"
        f" FROM catalogue_levels WHERE {' AND '.join([_HOLDS] * len(words))})",
        *(f" {word}{LEVEL_MARK}" for word in words for _column in ("tokens", "over")),
        *(tokens_of(word) for word in words),
    )


#: how many heads hold a word at each of its levels, best first (exact levels past ``CAP``).
#: Parameters: the word, twice.
_LEVEL_COUNTS = (
    f"SELECT level, count(*) FROM ({_WORD_LEVELS}) AS x(seq, level)"
    " GROUP BY level ORDER BY level DESC"
)
#: the heads holding a word at the given levels (in that order, each newest first), a page.
#: Parameters: the levels, the word, `` word·``, the page's size and offset.
_AT_LEVELS = (
    "SELECT l.seq FROM unnest(CAST(? AS int[])) WITH ORDINALITY AS g(level, o)"
    " CROSS JOIN LATERAL (SELECT seq, over FROM catalogue_levels WHERE string_to_array(tokens,"
    f" ' ') @> ARRAY[CAST(? AS text) || '{_M}' || least(g.level, {CAP})]) AS l"
    f" WHERE g.level < {CAP} OR {_level_in('l.over')} = CAST(g.level AS text)"
    " ORDER BY g.o, l.seq DESC LIMIT ? OFFSET ?"
)


def relevance_page(conn: Any, word: str, offset: int, limit: int) -> tuple[list[int], int]:
    """The heads holding ``word`` best first (its level, then newest), ``limit`` of them from
    ``offset``, and how many heads hold it: each level's heads are counted, and only the
    levels the page shows are read for their heads' sequences."""
    counts = [(int(level), int(n)) for level, n in conn.execute(_LEVEL_COUNTS, (word, word))]
    total = sum(n for _level, n in counts)
    skip, seen = offset, 0
    shown: list[int] = []  # the levels the page starts in and goes through
    for level, n in counts:
        if not shown and skip >= n:
            skip -= n
            continue
        shown.append(level)
        seen += n
        if seen - skip >= limit:
            break
    if not shown:
        return [], total
    rows = conn.execute(_AT_LEVELS, (shown, word, f" {word}{LEVEL_MARK}", limit, skip))
    return [int(r[0]) for r in rows], total
