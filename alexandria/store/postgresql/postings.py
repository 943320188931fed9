"""The catalogue's full-text index on PostgreSQL: one posting per (word, head).

SQLite keeps the heads' words in FTS5 tables (``store/search_index.py``); PostgreSQL keeps
``catalogue_postings(term, seq, title_count, body_count)``, written in the admission
transaction from the same normalised words (``core/search_text``: the stored text is those
words joined by spaces, so splitting on spaces gives exactly them).  A query's heads are those
holding every one of its distinct words; relevance is Σ 3 × title occurrences + body
occurrences — the contract's semantics, the same numbers the FTS5 path counts.  SQL only; no
driver import.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

TITLE_WEIGHT = 3
BODY_WEIGHT = 1


def postings(title: str, text: str) -> list[tuple[str, int, int]]:
    """(word, occurrences in the title, occurrences in the body) of a head's indexed words."""
    in_title, in_body = Counter(title.split()), Counter(text.split())
    return [(w, in_title[w], in_body[w]) for w in sorted(in_title.keys() | in_body.keys())]


def add(conn: Any, seq: int, title: str, text: str) -> None:
    conn.executemany(
        "INSERT INTO catalogue_postings(term, seq, title_count, body_count) VALUES (?, ?, ?, ?)",
        [(w, seq, t, b) for w, t, b in postings(title, text)],
    )


def forget(conn: Any, seq: int, title: str, text: str) -> None:
    """Remove the postings ``add`` wrote for the head ``seq`` of ``title`` and ``text``
    (exactly what was indexed): one probe of the primary key per word."""
    terms = sorted(set(title.split()) | set(text.split()))
    if terms:
        conn.execute("DELETE FROM catalogue_postings WHERE term = ANY(?) AND seq = ?",
                     (terms, seq))


def clear(conn: Any) -> None:
    conn.execute("DELETE FROM catalogue_postings")


def hits(words: list[str]) -> tuple[Any, ...]:
    """The ``h(seq, score)`` CTE of the heads holding every one of ``words`` (distinct), and
    its parameters (``reads/catalogue._search`` adds filters, order and page)."""
    marks = ",".join("?" * len(words))
    return (
        f"WITH h(seq, score) AS (SELECT seq, sum({TITLE_WEIGHT} * title_count"
        f" + {BODY_WEIGHT} * body_count) FROM catalogue_postings WHERE term IN ({marks})"
        " GROUP BY seq HAVING count(*) = ?)",
        *words, len(words),
    )
