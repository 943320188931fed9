"""The changes feed of one root (PROTOCOL §5): snapshot cursors that never skip, repeat or rewind.

Membership is maintained at admission (``store/feed.py``): for every object root R,
``feed(R, sequence)`` lists the global sequence of every revision of every member strictly
below R within ``feed.NEAR`` conversation levels, and R's own revisions are indexed by root
(``objects``, ``revisions_later``).  For a root without deep conversations (every root of most
libraries) a page is a merge of four index ranges over ``(after, hi]`` plus the signed records
of what it found — never a graph walk, and never a scan of non-members.  A *deep* root (one
with ``deep`` marks) also merges the revisions of its marked conversation trees, each tested
by a level-ancestor query (``reads/members.py``): its non-members in those trees are read and
counted against the scan bound, so a call may return fewer items than ``limit`` with
``has_more: true`` and a cursor past what it read.

Rules, in the order a call applies them:

1. ``root`` is a 64-hex id; ``limit`` is 1..50 (default 50); ``cursor``, when given, is the exact
   text a previous response returned: base64url without padding of
   ``version ‖ epoch tag ‖ root ‖ hi ‖ after ‖ anchor ‖ HMAC``.  Anything else is ``400``.
2. The HMAC-SHA256 (key: meta ``cursor_secret``) must verify, the cursor's root must be the
   requested root and ``after <= hi``: otherwise ``400``.
3. The cursor must be honourable against this database, otherwise ``409 resync_required``:
   the library epoch (meta ``epoch``) is the one the cursor was issued under; ``hi`` (hence
   ``after``) is not beyond the latest sequence; and the anchor — the first 16 bytes of the
   Merkle root of the log's first ``hi`` leaves — still matches, so a database restored from an
   older backup that has since grown past ``hi`` with other entries is caught too.
4. The window: no cursor → ``(0, latest]``; a cursor with ``after < hi`` → ``(after, hi]`` (the
   same snapshot); a cursor with ``after == hi`` (what ``has_more: false`` returns) →
   ``(hi, latest]``, a new snapshot.  Strictly ``after < sequence <= hi``.
5. The page: member revisions in the window, ascending, at most ``limit`` items and at most
   393,216 bytes of items, but at least one item when any remains.  "Scanned" means index
   entries read from the merged member ranges: a call reads at most ``min(limit + 1, scan)``
   entries (``scan`` = 10,000), each one a member revision — non-members are never read,
   because they are in none of the ranges — but for a deep root, whose marked conversation
   trees are read in full and whose level-ancestor probes count as well (``members.py``).
   When the scan bound is what stops the call, it returns what it read with ``has_more: true``
   (unless the last entry read is ``hi`` itself) and a cursor just past the scanned range.
6. ``has_more: false`` exactly when nothing of the window remains; its cursor has
   ``after = hi``.  Every response names its snapshot: ``"snapshot": hi``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import sqlite3
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from alexandria.core import merkle
from alexandria.errors import Failed, Malformed, NotFound, ResyncRequired
from alexandria.reads import members
from alexandria.store import read_sql
from alexandria.store.interface import Records
from alexandria.store.merkle_nodes import read_together
from alexandria.store.schema import revision_id

CURSOR_VERSION = 1
MAX_LIMIT = 50
PAGE_BYTES = 393_216
SCAN_LIMIT = 10_000
MAX_SEQUENCE = 2**53 - 1

_MAC_DOMAIN = b"alexandria.changes-cursor\x00"
_EPOCH_DOMAIN = b"alexandria.library-epoch\x00"
_BODY = struct.Struct(">B16s32sQQ16s")  # version, epoch tag, root, hi, after, anchor
_MAC_BYTES = 32
CURSOR_BYTES = _BODY.size + _MAC_BYTES
CURSOR_CHARS = (CURSOR_BYTES * 4 + 2) // 3  # base64url, no padding
_CURSOR_TEXT = re.compile(rf"[A-Za-z0-9_-]{{{CURSOR_CHARS}}}")
_ROOT = re.compile(r"[0-9a-f]{64}")


class BadCursor(Malformed):
    """A cursor this server did not issue for this root: malformed, truncated or forged."""

    default_code = "BAD_CURSOR"


@dataclass(frozen=True)
class Limits:
    """Page bounds; tests give a library smaller ones (``Library.limits``)."""

    page_bytes: int = PAGE_BYTES
    scan: int = SCAN_LIMIT


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Cursor:
    """What a cursor carries; ``anchor`` pins the log prefix of size ``hi``."""

    epoch: bytes
    root: str
    hi: int
    after: int
    anchor: bytes

    @property
    def complete(self) -> bool:
        """Returned with ``has_more: false``: the next call fixes a new snapshot."""
        return self.after == self.hi


def epoch_tag(epoch: str) -> bytes:
    return hashlib.sha256(_EPOCH_DOMAIN + epoch.encode()).digest()[:16]


def anchor_of(log_root: bytes) -> bytes:
    return log_root[:16]


def _mac(secret: bytes, body: bytes) -> bytes:
    return hmac.new(secret, _MAC_DOMAIN + body, hashlib.sha256).digest()


def encode_b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def encode_cursor(cursor: Cursor, secret: bytes) -> str:
    body = _BODY.pack(
        CURSOR_VERSION, cursor.epoch, bytes.fromhex(cursor.root), cursor.hi, cursor.after,
        cursor.anchor,
    )
    return encode_b64(body + _mac(secret, body))


def decode_cursor(text: str, secret: bytes) -> Cursor:
    """Step 1 and the HMAC of step 2; the root binding is checked by :func:`window`."""
    if not _CURSOR_TEXT.fullmatch(text):
        raise BadCursor(
            f"a cursor is the exact {CURSOR_CHARS}-character text a previous response returned",
            "CURSOR_MALFORMED", parameter="cursor", length=len(text),
        )
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != CURSOR_BYTES or encode_b64(raw) != text:
        raise BadCursor("the cursor is not canonical base64url", "CURSOR_MALFORMED",
                        parameter="cursor")
    body, mac = raw[: _BODY.size], raw[_BODY.size :]
    if not hmac.compare_digest(mac, _mac(secret, body)):
        raise BadCursor("the cursor was not issued by this library (HMAC mismatch)",
                        "CURSOR_FORGED", parameter="cursor")
    version, epoch, root, hi, after, anchor = _BODY.unpack(body)
    if version != CURSOR_VERSION:
        raise BadCursor(f"cursor version {version} is not supported", "CURSOR_VERSION",
                        parameter="cursor", supported=[CURSOR_VERSION])
    if after > hi or hi > MAX_SEQUENCE:
        raise BadCursor("the cursor's range is invalid", "CURSOR_MALFORMED", parameter="cursor")
    return Cursor(epoch, root.hex(), hi, after, anchor)


def check_root(value: str | None) -> str:
    if value is None:
        raise Malformed("root is required: the root id of the object to follow",
                        "MISSING_PARAMETER", parameter="root")
    if not _ROOT.fullmatch(value):
        raise Malformed("root is 64 lowercase hex characters", "BAD_PARAMETER",
                        parameter="root", value=value[:100])
    return value


# --- the window (steps 2-4): pure ------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    after: int
    hi: int
    anchor: bytes | None  # known when the snapshot is the cursor's; None when fixed now


def window(
    cursor: Cursor | None, root: str, epoch: bytes, latest: int,
    log_root: Callable[[int], bytes],
) -> Window:
    """The ``(after, hi]`` this call serves, or why the cursor cannot be honoured."""
    if cursor is None:
        return Window(0, latest, None)
    if cursor.root != root:
        raise BadCursor("the cursor belongs to another root", "CURSOR_OTHER_ROOT",
                        parameter="cursor", root=root)
    if cursor.epoch != epoch:
        raise ResyncRequired(
            "the library epoch changed since this cursor was issued (the database was"
            " replaced): follow the root again without a cursor", "EPOCH_CHANGED",
        )
    if cursor.hi > latest:
        raise ResyncRequired(
            "the cursor is beyond the latest sequence (the database was restored from an"
            " older backup): follow the root again without a cursor", "CURSOR_BEYOND_LOG",
            after=cursor.after, hi=cursor.hi, latest=latest,
        )
    if anchor_of(log_root(cursor.hi)) != cursor.anchor:
        raise ResyncRequired(
            f"the log's first {cursor.hi} entries are not the ones this cursor was issued"
            " against (the database was restored and has grown again): follow the root again"
            " without a cursor", "LOG_DIVERGED", hi=cursor.hi, latest=latest,
        )
    if cursor.complete:
        return Window(cursor.hi, latest, None)
    return Window(cursor.after, cursor.hi, cursor.anchor)


# --- the page (step 5-6): pure ---------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    items: list[bytes]
    after: int
    hi: int
    has_more: bool


def scan_count(limit: int, limits: Limits) -> int:
    """How many member entries a call reads: one more than ``limit`` tells whether any
    remain, and never more than the scan bound."""
    return min(limit + 1, limits.scan)


def fill_page(
    win: Window, scanned: Sequence[int], fetch: Callable[[int], bytes], limit: int,
    limits: Limits,
) -> Page:
    """``scanned``: the member sequences read from the index for ``win``, ascending, at most
    :func:`scan_count` of them."""
    items: list[bytes] = []
    size = 0
    last = win.after
    for seq in scanned:
        if len(items) == limit:
            break
        data = fetch(seq)
        if items and size + len(data) > limits.page_bytes:
            break
        items.append(data)
        size += len(data)
        last = seq
    if len(items) < len(scanned):  # stopped by limit or bytes: the rest is still to come
        return Page(items, last, win.hi, True)
    if len(scanned) == scan_count(limit, limits) and last < win.hi:
        return Page(items, last, win.hi, True)  # the scan bound stopped the read
    return Page(items, win.hi, win.hi, False)


def render(page: Page, cursor: str) -> bytes:
    """The response body, splicing the stored signed records as they are."""
    return b"".join((
        b'{"cursor":"', cursor.encode("ascii"), b'","has_more":',
        b"true" if page.has_more else b"false", b',"items":[', b",".join(page.items),
        b'],"snapshot":', str(page.hi).encode("ascii"), b"}",
    ))


# --- reading the database --------------------------------------------------------------------


def _meta(conn: sqlite3.Connection, key: str) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise Failed(f"meta {key!r} is missing", "STORAGE_CORRUPT")
    return str(row[0])


def _log_root(conn: sqlite3.Connection, size: int) -> bytes:
    return read_together(conn, lambda get: merkle.root_hash(size, get))


def _followable(conn: sqlite3.Connection, root: str) -> int:
    """The ``objects`` key of the object ``root`` (the sequence of its first revision, the one
    revision whose id is its root), or the error naming what ``root`` is instead."""
    row = conn.execute(f"SELECT sequence, root FROM revisions WHERE {revision_id('?')}",
                       (root, root)).fetchone()
    if row is None:
        raise NotFound(f"no object with root {root}", "UNKNOWN_ROOT", root=root)
    if row[1] != root:
        raise Malformed("root names a revision that is not a root: follow its root",
                        "NOT_A_ROOT", parameter="root", root=row[1])
    return int(row[0])


def read_changes(
    conn: sqlite3.Connection, source: Records, root: str, cursor_text: str | None,
    limit: int, limits: Limits = DEFAULT_LIMITS,
) -> bytes:
    """One ``/api/changes`` call inside one read transaction on ``conn``; the response body."""
    conn.execute("BEGIN")
    try:
        secret = bytes.fromhex(_meta(conn, "cursor_secret"))
        epoch = epoch_tag(_meta(conn, "epoch"))
        cursor = None if cursor_text is None else decode_cursor(cursor_text, secret)
        latest = int(conn.execute("SELECT coalesce(max(sequence), 0) FROM log").fetchone()[0])
        win = window(cursor, root, epoch, latest, lambda size: _log_root(conn, size))
        owner = _followable(conn, root)

        def fetch(seq: int) -> bytes:
            data = source.signed(conn, seq)
            if data is None:
                raise Failed(f"feed entry {seq} has no revision", "STORAGE_CORRUPT")
            return data

        trees = members.deep_trees(conn, owner)
        if trees:
            page = _deep_page(conn, root, owner, trees, win, fetch, limit, limits)
        else:
            scanned = [
                int(r[0]) for r in conn.execute(
                    read_sql.member_sequences(conn),
                    {"root": root, "owner": owner, "after": win.after, "hi": win.hi,
                     "n": scan_count(limit, limits)},
                )
            ]
            reader = _read_together(conn, source, scanned[:limit], fetch) \
                if read_sql.asks_together(conn) else fetch
            page = fill_page(win, scanned, reader, limit, limits)
        anchor = win.anchor if win.anchor is not None else anchor_of(_log_root(conn, win.hi))
        next_cursor = Cursor(epoch, root, page.hi, page.after, anchor)
        return render(page, encode_cursor(next_cursor, secret))
    finally:
        conn.execute("COMMIT")


def _read_together(conn: sqlite3.Connection, source: Records, sequences: list[int],
                   fetch: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """``fetch`` with the records of ``sequences`` read by one statement beforehand
    (``signed_many``), for PostgreSQL, where each statement is a round trip to the server: a
    page of 50 records cost 50 of them.  (SQLite reads them one by one in-process, its pages
    read ahead.)  A record that is missing is left to ``fetch``, which names it."""
    records = source.signed_many(conn, sequences)
    if len(records) != len(sequences):
        return fetch
    found = dict(zip(sequences, records, strict=True))

    def prefetched(seq: int) -> bytes:
        data = found.get(seq)
        return data if data is not None else fetch(seq)

    return prefetched


_TREE_SEQUENCES = (
    "SELECT r.sequence, o.created_sequence, o.cdepth FROM revisions r"
    f" JOIN revisions f ON {revision_id('r.root', 'f.id')}"
    " JOIN objects o ON o.created_sequence = f.sequence"
    " WHERE r.tree = :tree AND r.tree != 0 AND r.sequence > :after AND r.sequence <= :hi"
    " ORDER BY r.sequence LIMIT :n"
)


def _deep_page(
    conn: sqlite3.Connection, root: str, owner: int, trees: dict[int, list[members.DeepMark]],
    win: Window, fetch: Callable[[int], bytes], limit: int, limits: Limits,
) -> Page:
    """A page of a deep root: its own and near members merged with its marked trees'
    members, every index entry and probe counted against ``limits.scan``."""

    def near(after: int, n: int) -> list[tuple[int, int, int]]:
        return [(int(r[0]), 0, 0) for r in conn.execute(
            read_sql.MEMBER_SEQUENCES,
            {"root": root, "owner": owner, "after": after, "hi": win.hi, "n": n})]

    def tree_range(tree: int) -> members.ReadRange:
        def rows(after: int, n: int) -> list[tuple[int, int, int]]:
            return [(int(a), int(b), int(c)) for a, b, c in conn.execute(
                _TREE_SEQUENCES, {"tree": tree, "after": after, "hi": win.hi, "n": n})]
        return rows

    ranges: list[tuple[members.ReadRange, list[members.DeepMark] | None]] = [(near, None)]
    ranges += [(tree_range(tree), marks) for tree, marks in trees.items()]
    want = scan_count(limit, limits)
    positions = members.Positions(conn, members.Budget(limits.scan))
    found, decided = members.merge(ranges, win.after, want, positions)
    page = fill_page(win, found, fetch, limit, limits)
    if decided is None or len(found) == want or page.has_more:
        return page
    # the scan bound stopped the call: everything up to ``decided`` was read
    return Page(page.items, decided, win.hi, decided < win.hi)
