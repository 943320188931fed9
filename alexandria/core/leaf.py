"""The log leaf (PROTOCOL §7) and where the pieces of a contribution sit inside it.

Leaf data is ``JCS({"admitted_at": ADMITTED_AT, "document": DOCUMENT})``: the document as
admitted (``{"record", "signature"}`` for a contribution, the authority certificate or
revocation document otherwise) together with the time the library says it admitted it.  The
admission time is the one fact only the host attests — it decides priority between
contributions and is the clock of the certificate-validity and timestamp rules a replay
re-checks — so the tree commits to it: changing it changes the leaf hash.

JCS sorts ``admitted_at`` before ``document`` and a §1 timestamp needs no escaping, so the leaf is
the canonical document spliced between two fixed byte strings, with no re-canonicalisation
(``tests/core/test_leaf.py`` proves the splice equals ``rfc8785`` on a generated corpus).  Likewise
a contribution's document is ``{"record":`` RECORD ``,"signature":`` SIGNATURE ``}``, so the record
sits at a fixed offset in every contribution leaf.  Every offset used to slice stored bytes,
in Python and in SQL, is derived here from these named prefixes — never written as a number.
"""

from __future__ import annotations

from alexandria.core.timestamps import parse_ms
from alexandria.errors import Malformed

LEAF_FORMAT = "alexandria.leaf/2"
"""Recorded in the ``meta`` table of every library: leaves commit to their admission time.
(Version 1, never named in a database, was ``JCS(document)`` alone.)"""

ADMITTED_AT_LENGTH = len("YYYY-MM-DDTHH:MM:SS.sssZ")
LEAF_HEAD = b'{"admitted_at":"'
LEAF_DOCUMENT = b'","document":'
LEAF_TAIL = b"}"
ADMITTED_AT_OFFSET = len(LEAF_HEAD)
DOCUMENT_OFFSET = ADMITTED_AT_OFFSET + ADMITTED_AT_LENGTH + len(LEAF_DOCUMENT)

CONTRIBUTION_HEAD = b'{"record":'
CONTRIBUTION_SIGNATURE = b',"signature":'
CONTRIBUTION_TAIL = b"}"
RECORD_OFFSET = DOCUMENT_OFFSET + len(CONTRIBUTION_HEAD)
"""Where a contribution's record starts in its leaf (0-based)."""


class LeafMalformed(Malformed):
    default_code = "LEAF_MALFORMED"


def leaf_bytes(admitted_at: str, document: bytes) -> bytes:
    """The leaf of ``document`` (its canonical bytes) admitted at ``admitted_at``."""
    if (
        not isinstance(admitted_at, str)  # it may come from a server's JSON
        or len(admitted_at) != ADMITTED_AT_LENGTH
        or parse_ms(admitted_at) is None
    ):
        raise LeafMalformed(f"admitted_at {admitted_at!r} is not a timestamp",
                            admitted_at=admitted_at)
    return b"".join((LEAF_HEAD, admitted_at.encode("ascii"), LEAF_DOCUMENT, document, LEAF_TAIL))


def split_leaf(leaf: bytes) -> tuple[str, bytes]:
    """``(admitted_at, document bytes)`` of a leaf, checking its frame (not the document's own
    canonical form, which its reader checks)."""
    if (
        len(leaf) <= DOCUMENT_OFFSET + len(LEAF_TAIL)
        or not leaf.startswith(LEAF_HEAD)
        or leaf[DOCUMENT_OFFSET - len(LEAF_DOCUMENT) : DOCUMENT_OFFSET] != LEAF_DOCUMENT
        or not leaf.endswith(LEAF_TAIL)
    ):
        raise LeafMalformed('a leaf is {"admitted_at": TIMESTAMP, "document": DOCUMENT}')
    admitted_at = leaf[ADMITTED_AT_OFFSET : ADMITTED_AT_OFFSET + ADMITTED_AT_LENGTH].decode(
        "ascii", "replace")
    if parse_ms(admitted_at) is None:
        raise LeafMalformed("the leaf's admitted_at is not a timestamp")
    return admitted_at, leaf[DOCUMENT_OFFSET : -len(LEAF_TAIL)]


def admitted_at_of(leaf: bytes) -> str:
    """The admission time of a stored (well-formed) leaf."""
    return leaf[ADMITTED_AT_OFFSET : ADMITTED_AT_OFFSET + ADMITTED_AT_LENGTH].decode("ascii")


def document_of(leaf: bytes) -> bytes:
    """The canonical document of a stored (well-formed) leaf."""
    return leaf[DOCUMENT_OFFSET : -len(LEAF_TAIL)]


# --- a contribution's pieces -----------------------------------------------------------------


def record_of(leaf: bytes, record_length: int) -> bytes:
    """``JCS(record)`` of a stored contribution leaf whose record is ``record_length`` bytes."""
    return leaf[RECORD_OFFSET : RECORD_OFFSET + record_length]


def record_sql(column: str = "leaf", length: str = "?") -> str:
    """The SQL expression for :func:`record_of` over a stored leaf ``column``, the record's
    length given by ``length`` (a parameter by default, or a column).  SQLite's ``substr``
    counts from 1."""
    return f"substr({column}, {RECORD_OFFSET + 1}, {length})"


def document_record(document: bytes, record_length: int) -> bytes:
    """``JCS(record)`` of a contribution document ``JCS({"record", "signature"})``."""
    start = len(CONTRIBUTION_HEAD)
    return document[start : start + record_length]


def document_signature(document: bytes, record_length: int) -> bytes:
    """``JCS(signature)`` of a contribution document ``JCS({"record", "signature"})``."""
    start = len(CONTRIBUTION_HEAD) + record_length + len(CONTRIBUTION_SIGNATURE)
    return document[start : -len(CONTRIBUTION_TAIL)]
