"""What the catalogue matches and shows: normalised words, a contribution's human text and its
snippet (docs/read-api.md).

Text and queries are compared after NFKC normalisation and case folding (NFKC, casefold, NFKC
again, since folding can denormalise).  A *word* is a maximal run of letters, digits and
combining marks; everything else separates words.  The full-text index stores the words of a
text joined by single spaces and splits them again with SQLite's ``ascii`` tokenizer, which
treats every non-ASCII character as part of a word and splits on ASCII punctuation and spaces:
the words produced here never contain ASCII punctuation, so the index sees exactly these words.

An object's body is a canonical JSON string; its *human text* is the string values of the
fields a reader writes (a claim's statement, scope and assumptions; an evidence's content and
its sources' labels and excerpts; …), never the JSON keys, the enumerated ``method``,
``verdict`` and ``relation`` values, or 64-hex revision ids.  A reply's human text is its body.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson

from alexandria.core.keys import HEX64
from alexandria.core.records import Record

LEVEL_MARK = "\u00b7"  # "·": not a word character, so "word·score" names one word's level
SNIPPET_CHARACTERS = 280
MAX_WORD_CHARACTERS = 64
#: ASCII text's words, by ``bytes.translate``: a letter (lowered) or a digit stays, every
#: other byte becomes a space (a quarter of the time a regular expression's ``findall`` takes)
_ASCII_WORDS = bytes(ord(ch.lower()) if ch.isascii() and ch.isalnum() else ord(" ")
                     for ch in map(chr, range(256)))
# ASCII capitals can survive NFKC(casefold(...)) only in odd corners; the index folds them too
_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", "abcdefghijklmnopqrstuvwxyz ")

# The fields of each kind's body that hold human text, in reading order.
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "space": ("summary",),
    "discussion": ("text",),
    "document": ("text",),
    "claim": ("statement", "scope", "assumptions"),
    "evidence": ("content", "sources", "reproducibility"),
    "assessment": ("rationale",),
    "relationship": ("rationale",),
    "proposal": ("title", "rationale", "body"),
}
# Inside nested values (sources, reproducibility, a proposed body) these keys are not text.
_NOT_TEXT = frozenset(("method", "verdict", "relation", "status", "digest", "retrieved_at"))


def normalise(text: str) -> str:
    """NFKC and case folding."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


@cache
def _word_pattern() -> re.Pattern[str]:
    """Letters, digits and ``_`` (``\\w``) plus every combining mark (Unicode category M);
    ``words`` turns ``_`` into a space first."""
    ranges: list[tuple[int, int]] = []
    for plane_start, plane_end in ((0, 0x20000), (0xE0000, 0xE1000)):
        start = -1
        for cp in range(plane_start, plane_end):
            is_mark = unicodedata.category(chr(cp))[0] == "M"
            if is_mark and start < 0:
                start = cp
            elif not is_mark and start >= 0:
                ranges.append((start, cp - 1))
                start = -1
        if start >= 0:
            ranges.append((start, plane_end - 1))
    marks = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)
    return re.compile(f"[\\w{marks}]+")


def words(text: str) -> list[str]:
    """The normalised words of ``text`` (each at most 64 characters)."""
    text = normalise(text)
    if text.isascii():  # the common case, without the large character class
        found = text.encode().translate(_ASCII_WORDS).decode().split()
    else:
        found = _word_pattern().findall(text.translate(_FOLD))
    if max(map(len, found), default=0) <= MAX_WORD_CHARACTERS:  # almost always
        return found
    return [w if len(w) <= MAX_WORD_CHARACTERS else w[:MAX_WORD_CHARACTERS] for w in found]


def indexed(text: str) -> str:
    """What the full-text index stores for ``text``."""
    return " ".join(words(text))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if not HEX64.match(value):
            yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key in sorted(value):
            if key not in _NOT_TEXT:
                yield from _strings(value[key])


def human_text(kind: str, body: str, decoded: Any = None) -> str:
    """The text a reader wrote: a reply's body, or the text fields of an object's body."""
    fields = TEXT_FIELDS.get(kind)
    if fields is None:
        return body
    if decoded is None:
        decoded = orjson.loads(body)
    if not isinstance(decoded, dict):
        return ""
    parts: list[str] = []
    for name in fields:
        if name in decoded:
            parts.extend(_strings(decoded[name]))
    return "\n".join(parts)


def snippet(body: str) -> str:
    """The contract's snippet: the first 280 characters of the record's ``body`` string, as
    signed (for object kinds that is the canonical JSON encoding).  Literal, so that any
    implementation of the contract derives the same hint from the same record."""
    return body[:SNIPPET_CHARACTERS]


def levels(title: str, body: str) -> str:
    """Each distinct word of a head once, with its relevance for a one-word query:
    ``word·(3 × title occurrences + body occurrences)``."""
    score = Counter(title.split())  # counted in C, in order of first occurrence
    for word in score:
        score[word] *= 3
    score.update(body.split())
    return " ".join([f"{w}{LEVEL_MARK}{n}" for w, n in score.items()])


@dataclass(frozen=True)
class IndexText:
    """What the full-text indexes hold for one head: its normalised title and human text and
    their one-word relevance levels.  A pure function of the record, so the HTTP worker computes
    it before the write transaction (``rules.admission.prepare(index_text=True)``), and the
    catalogue's indexes (``store.search_index``) store it."""

    title: str
    text: str
    levels: str


def index_text(record: Record) -> IndexText | None:
    """``None`` for votes, which the catalogue counts but does not index."""
    if record.kind == "vote":
        return None
    return text_of(record.kind, record.title, record.body, record.decoded_body)


def text_of(kind: str, title: str, body: str, decoded: Any) -> IndexText:
    """``index_text`` from a record's fields (``decoded``: its body decoded, for object kinds)."""
    words_of_title = indexed(title)
    words = indexed(human_text(kind, body, decoded))
    return IndexText(words_of_title, words, levels(words_of_title, words))
