"""The verifiable log (PROTOCOL §7): tree heads, proofs, entry pages and signed checkpoints.

Leaves and perfect Merkle nodes are written by the admission transaction
(``store/admission.append_leaf``); this module only reads them, plus its own ``checkpoints``
table.  Every tree head and proof is computed from stored perfect nodes with ``O(log n)`` reads
(``merkle.subtree_hash``).

Checkpoints are signed by ``service/checkpoint_signer.py``; this module reads the persisted ones,
with the witnesses' cosignature lines (``store/cosignatures.py``) after the log's signature.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace

from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.log_wire import PAGE_BYTES, PAGE_CHECKPOINTS, PAGE_ENTRIES, entry_bytes
from alexandria.errors import Malformed
from alexandria.store import cosignatures
from alexandria.store.merkle_nodes import read_together, tree_size

_log = logging.getLogger("alexandria.reads.log")




class LogRange(Malformed):
    default_code = "LOG_RANGE"


@dataclass(frozen=True)
class StoredCheckpoint:
    size: int
    root: bytes
    note: str
    key: str
    signed_at: str


# --- tree heads and proofs -------------------------------------------------------------------


def inclusion_proof(conn: sqlite3.Connection, index: int, size: int) -> list[bytes]:
    current = tree_size(conn)
    if not 0 <= index < size <= current:
        raise LogRange(
            "an inclusion proof needs 0 <= index < size <= tree size", index=index, size=size,
            tree_size=current,
        )
    return read_together(conn, lambda get: merkle.inclusion_proof(index, size, get))


def consistency_proof(conn: sqlite3.Connection, old: int, new: int) -> list[bytes]:
    current = tree_size(conn)
    if not 0 < old <= new <= current:
        raise LogRange(
            "a consistency proof needs 0 < old <= new <= tree size", old=old, new=new,
            tree_size=current,
        )
    return read_together(conn, lambda get: merkle.consistency_proof(old, new, get))


# --- entries ---------------------------------------------------------------------------------


def entries_page(conn: sqlite3.Connection, start: int, end: int) -> bytes:
    """``{"entries": [...], "next": N | null}`` for leaves ``[start, end)`` (0-based), at most
    ``PAGE_ENTRIES`` entries or ``PAGE_BYTES`` bytes of entries and at least one; ``next`` is
    the first index of the requested range not returned, null when it was covered."""
    current = tree_size(conn)
    if not 0 <= start < end <= current:
        raise LogRange(
            "entries need 0 <= start < end <= tree size", start=start, end=end,
            tree_size=current,
        )
    items: list[bytes] = []
    used = 0
    for seq, kind, leaf in conn.execute(
        "SELECT sequence, type, leaf FROM log WHERE sequence > ? AND sequence <= ?"
        " ORDER BY sequence LIMIT ?",
        (start, end, PAGE_ENTRIES),
    ):
        item = entry_bytes(seq, kind, bytes(leaf))
        if items and used + len(item) > PAGE_BYTES:
            break
        items.append(item)
        used += len(item)
    following = start + len(items)
    nxt = b"null" if following >= end else str(following).encode()
    return b'{"entries":[' + b",".join(items) + b'],"next":' + nxt + b"}"


# --- checkpoints -----------------------------------------------------------------------------


def _stored(row: tuple[int, bytes, str, str, str]) -> StoredCheckpoint:
    return StoredCheckpoint(int(row[0]), bytes(row[1]), row[2], row[3], row[4])


def latest_checkpoint(conn: sqlite3.Connection) -> StoredCheckpoint | None:
    row = conn.execute(
        "SELECT size, root, note, key, signed_at FROM checkpoints ORDER BY size DESC LIMIT 1"
    ).fetchone()
    return None if row is None else _stored(row)


def checkpoints_after(
    conn: sqlite3.Connection, after: int, upto: int | None = None, limit: int = PAGE_CHECKPOINTS,
    cosigned: bool = False,
) -> list[StoredCheckpoint]:
    """Persisted checkpoints with ``after < size (<= upto)``, smallest first; ``cosigned``:
    each note followed by its witnesses' cosignature lines (as served)."""
    found = [
        _stored(r)
        for r in conn.execute(
            "SELECT size, root, note, key, signed_at FROM checkpoints"
            " WHERE size > ? AND size <= ? ORDER BY size LIMIT ?",
            (after, (1 << 63) - 1 if upto is None else upto, limit),
        )
    ]
    if not cosigned or not found:
        return found
    extra = cosignatures.lines_between(conn, after, found[-1].size)
    return [replace(c, note=c.note + extra[c.size]) if c.size in extra else c for c in found]


def served_checkpoint(
    conn: sqlite3.Connection, newest: StoredCheckpoint, witnesses: Sequence[str] = (),
    quorum: int = 0,
) -> str:
    """The note ``GET /api/log/checkpoint`` serves, with its cosignature lines: ``newest``, or
    with a witness ``quorum``, the newest checkpoint that many of ``witnesses`` cosigned (the
    newest until one has)."""
    chosen = newest
    if quorum:
        size = cosignatures.latest_with_quorum(conn, witnesses, quorum)
        if size and size != newest.size:
            found = checkpoints_after(conn, size - 1, size, 1)
            if found:
                chosen = found[0]
    return chosen.note + cosignatures.lines(conn, chosen.size)


def checkpoints_page(conn: sqlite3.Connection, after: int) -> bytes:
    """``{"checkpoints": [{"note", "size"}...], "next": SIZE | null}``, canonical JSON: at most
    ``PAGE_CHECKPOINTS`` checkpoints or ``PAGE_BYTES`` bytes of them, at least one (so that a
    follower's cap on the answer, ``audit/answer_caps.py``, holds whatever the notes carry);
    ``next`` is the size of the last one served when more follow."""
    found = checkpoints_after(conn, after, limit=PAGE_CHECKPOINTS + 1, cosigned=True)
    items: list[bytes] = []
    used = 0
    for c in found[:PAGE_CHECKPOINTS]:
        item = canonical({"note": c.note, "size": c.size})
        if items and used + len(item) > PAGE_BYTES:
            break
        items.append(item)
        used += len(item)
    more = len(found) > len(items)
    nxt = str(found[len(items) - 1].size).encode() if more else b"null"
    return b'{"checkpoints":[' + b",".join(items) + b'],"next":' + nxt + b"}"
