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

A query's heads are those holding every one of its distinct words; a word's heads and levels
are read level by level (``word·1`` … ``word·CAP``: one index probe each), so relevance — Σ of
the query words' levels — is summed without reading the heads' texts.  The levels are those
the FTS5 path counts, so both backends rank alike.  SQL only; no driver import.
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


# One word's heads and levels: a probe of the index per level; a head at CAP reads its
# exact level from ``over``.  Parameters: the word, twice.
_M = LEVEL_MARK
_WORD_LEVELS = (
    f"SELECT l.seq, CASE WHEN g.k < {CAP} THEN g.k ELSE"
    f" (SELECT split_part(t, '{_M}', 2)::int FROM unnest(string_to_array(l.over, ' ')) AS t"
    f"  WHERE split_part(t, '{_M}', 1) = CAST(? AS text)) END"
    f" FROM generate_series(1, {CAP}) AS g(k) CROSS JOIN LATERAL"
    " (SELECT seq, over FROM catalogue_levels"
    f"  WHERE string_to_array(tokens, ' ') @> ARRAY[CAST(? AS text) || '{_M}' || g.k]) AS l"
)


def hits(words: list[str]) -> tuple[Any, ...]:
    """The ``h(seq, score)`` CTE of the heads holding every one of ``words`` (distinct), and
    its parameters (``reads/catalogue._search`` adds filters, order and page)."""
    # MATERIALIZED: the heads are found first, whatever the page's filters and order (the
    # planner would otherwise run the probes for each catalogue row in the order's index)
    if len(words) == 1:  # a head holds a word at one level: nothing to sum
        return f"WITH h(seq, score) AS MATERIALIZED ({_WORD_LEVELS})", words[0], words[0]
    return (
        f"WITH h(seq, score) AS MATERIALIZED (SELECT seq, sum(level) FROM"
        f" ({' UNION ALL '.join([_WORD_LEVELS] * len(words))}) AS x(seq, level)"
        " GROUP BY seq HAVING count(*) = ?)",
        *(w for word in words for w in (word, word)), len(words),
    )
