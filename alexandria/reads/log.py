"""The verifiable log (PROTOCOL §7): tree heads, proofs, entry pages and signed checkpoints.

Leaves and perfect Merkle nodes are written by the admission transaction
(``SqliteStorage._append_leaf``); this module only reads them, plus its own ``checkpoints``
table.  Every tree head and proof is computed from stored perfect nodes with ``O(log n)`` reads
(``merkle.subtree_hash``).

Checkpoint policy.  A checkpoint is signed inside one write transaction, so it is atomic and
serialised with admissions, also across several server processes on one database:

1. read the latest persisted checkpoint and the tree size; a tree smaller than the latest
   checkpoint is corruption (``LOG_TRUNCATED``): sizes only grow, also across restarts;
2. nothing to do when the tree has not grown (or, for the background signer, when the latest
   checkpoint is less than a second old);
3. the log key must hold an admitted authority certificate with role ``log``, valid when the
   last leaf it would cover was admitted and not expired now, and not revoked
   (:func:`check_log_key`, shared with the offline verifier);
4. compute the new root and a consistency proof from the latest checkpoint, and verify that
   proof against the *persisted* old root: the log never signs two inconsistent checkpoints;
5. sign the C2SP note and insert it.

GET ``/api/log/checkpoint`` signs on demand when the tree is larger than the latest checkpoint;
a background task (:func:`background_signer`) signs at most once a second while the log grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from alexandria.core import merkle
from alexandria.core.canonical import canonical
from alexandria.core.checkpoint import Checkpoint, sign_checkpoint
from alexandria.core.keys import SigningKey
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.errors import BadRequest, ServiceError
from alexandria.rules.authority import LOG_ROLE, LogUnavailable, check_log_key

if TYPE_CHECKING:
    from alexandria.service.library import Library
    from alexandria.store.sqlite import SqliteStorage

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints(
    size INTEGER PRIMARY KEY,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    key TEXT NOT NULL,
    signed_at TEXT NOT NULL
);
"""

PAGE_ENTRIES = 50
PAGE_BYTES = 393_216
PAGE_CHECKPOINTS = 1000
SIGN_INTERVAL_MS = 1000

_log = logging.getLogger("alexandria.reads.log")


class LogCorrupt(ServiceError):
    """Stored leaves or nodes disagree with a persisted checkpoint: the server refuses to sign."""

    default_code = "LOG_CORRUPT"


class LogRange(BadRequest):
    default_code = "LOG_RANGE"


@dataclass(frozen=True)
class StoredCheckpoint:
    size: int
    root: bytes
    note: str
    key: str
    signed_at: str


# --- tree heads and proofs -------------------------------------------------------------------


def node_reader(conn: sqlite3.Connection) -> merkle.GetNode:
    """``get(level, index)`` over the stored perfect nodes."""

    def get(level: int, idx: int) -> bytes:
        row = conn.execute(
            "SELECT hash FROM merkle_nodes WHERE position = ?", (merkle.position(level, idx),)
        ).fetchone()
        if row is None:
            raise LogCorrupt(f"merkle node ({level}, {idx}) is missing", level=level, index=idx)
        return bytes(row[0])

    return get


def tree_size(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT max(sequence) FROM log").fetchone()
    return int(row[0] or 0)


def inclusion_proof(conn: sqlite3.Connection, index: int, size: int) -> list[bytes]:
    current = tree_size(conn)
    if not 0 <= index < size <= current:
        raise LogRange(
            "an inclusion proof needs 0 <= index < size <= tree size", index=index, size=size,
            tree_size=current,
        )
    return merkle.inclusion_proof(index, size, node_reader(conn))


def consistency_proof(conn: sqlite3.Connection, old: int, new: int) -> list[bytes]:
    current = tree_size(conn)
    if not 0 < old <= new <= current:
        raise LogRange(
            "a consistency proof needs 0 < old <= new <= tree size", old=old, new=new,
            tree_size=current,
        )
    return merkle.consistency_proof(old, new, node_reader(conn))


# --- entries ---------------------------------------------------------------------------------


def entry_bytes(sequence: int, kind: str, admitted_at: str, leaf: bytes) -> bytes:
    """``JCS({"admitted_at", "leaf", "sequence", "type"})`` with the stored leaf spliced in.

    The leaf is ``JCS(document)``, so the result is canonical and the leaf's bytes are a
    verbatim slice of it; re-canonicalising the parsed ``leaf`` gives them back exactly.
    """
    return b"".join((
        b'{"admitted_at":"', admitted_at.encode(), b'","leaf":', leaf,
        b',"sequence":', str(sequence).encode(), b',"type":"', kind.encode(), b'"}',
    ))


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
    for seq, kind, admitted_at, leaf in conn.execute(
        "SELECT sequence, type, admitted_at, leaf FROM log WHERE sequence > ? AND sequence <= ?"
        " ORDER BY sequence LIMIT ?",
        (start, end, PAGE_ENTRIES),
    ):
        item = entry_bytes(seq, kind, admitted_at, bytes(leaf))
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
    conn: sqlite3.Connection, after: int, upto: int | None = None, limit: int = PAGE_CHECKPOINTS
) -> list[StoredCheckpoint]:
    """Persisted checkpoints with ``after < size (<= upto)``, smallest first."""
    return [
        _stored(r)
        for r in conn.execute(
            "SELECT size, root, note, key, signed_at FROM checkpoints"
            " WHERE size > ? AND size <= ? ORDER BY size LIMIT ?",
            (after, (1 << 63) - 1 if upto is None else upto, limit),
        )
    ]


def checkpoints_page(conn: sqlite3.Connection, after: int) -> bytes:
    """``{"checkpoints": [{"note", "size"}...], "next": SIZE | null}``, canonical JSON."""
    found = checkpoints_after(conn, after, limit=PAGE_CHECKPOINTS + 1)
    more = len(found) > PAGE_CHECKPOINTS
    found = found[:PAGE_CHECKPOINTS]
    return canonical({
        "checkpoints": [{"note": c.note, "size": c.size} for c in found],
        "next": found[-1].size if more else None,
    })


def sign_checkpoint_now(
    conn: sqlite3.Connection, storage: SqliteStorage, key: SigningKey | None,
    min_interval_ms: int = 0,
) -> StoredCheckpoint:
    """Steps 1–5 of the module docstring, inside the caller's write transaction."""
    now = storage.clock()
    # 1.
    latest = latest_checkpoint(conn)
    size = tree_size(conn)
    if latest is not None and size < latest.size:
        raise LogCorrupt(
            f"the log holds {size} leaves but checkpoint {latest.size} was signed",
            "LOG_TRUNCATED", tree_size=size, checkpoint_size=latest.size,
        )
    # 2.
    if latest is not None:
        signed_ms = parse_ms(latest.signed_at) or 0
        if size == latest.size or now - signed_ms < min_interval_ms:
            return latest
    details = {"tree_size": size, "checkpoint_size": latest.size if latest else 0}
    if key is None:
        raise LogUnavailable(
            "this server has no log key (--log-key): it cannot sign a checkpoint of the"
            " current tree", "LOG_KEY_MISSING", **details,
        )
    # 3.
    last = conn.execute("SELECT admitted_at FROM log WHERE sequence = ?", (size,)).fetchone()
    if last is None:
        raise LogUnavailable("the log is empty: nothing to sign yet", "LOG_EMPTY", **details)
    last_ms = parse_ms(last[0])
    assert last_ms is not None
    view = storage._view(conn)
    certificates = view.authorities(key.public_hex)
    try:
        check_log_key(certificates, view.revoked(key.public_hex, None), key.public_hex, last_ms)
        if not any(LOG_ROLE in c.roles and c.valid_at(now) for _s, c in certificates):
            raise LogUnavailable(
                "the log key's certificate is not valid now", "LOG_KEY_EXPIRED",
                key=key.public_hex, at=format_ms(now),
            )
    except LogUnavailable as exc:
        exc.details.update(details)
        raise
    # 4.
    get = node_reader(conn)
    root = merkle.root_hash(size, get)
    if latest is not None:
        proof = merkle.consistency_proof(latest.size, size, get)
        try:
            merkle.verify_consistency(latest.size, size, latest.root, root, proof)
        except merkle.MerkleError as exc:
            raise LogCorrupt(
                f"the tree of size {size} is not consistent with checkpoint {latest.size}:"
                f" {exc.reason}", "LOG_INCONSISTENT", **details,
            ) from exc
    # 5.
    note = sign_checkpoint(Checkpoint(storage.genesis.origin, size, root), key)
    signed = StoredCheckpoint(size, root, note, key.public_hex, format_ms(now))
    conn.execute(
        "INSERT INTO checkpoints(size, root, note, key, signed_at) VALUES (?, ?, ?, ?, ?)",
        (signed.size, signed.root, signed.note, signed.key, signed.signed_at),
    )
    return signed


class CheckpointSigner:
    """One library's checkpoint signer; concurrent requests share one signing."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self._latest: StoredCheckpoint | None = None
        self._lock = asyncio.Lock()

    async def _sign(self, min_interval_ms: int) -> StoredCheckpoint:
        storage, key = self.library.storage, self.library.log_key
        signed = await storage.write(
            lambda conn: sign_checkpoint_now(conn, storage, key, min_interval_ms)
        )
        if self._latest is None or signed.size > self._latest.size:
            self._latest = signed
        return signed

    async def current(self) -> StoredCheckpoint:
        """A checkpoint of the whole tree as it is now, signed on demand if needed."""
        size = await self.library.storage.log_size()
        latest = self._latest
        if latest is not None and latest.size >= size:
            return latest
        async with self._lock:
            latest = self._latest
            if latest is not None and latest.size >= size:
                return latest
            return await self._sign(0)

    async def tick(self) -> StoredCheckpoint | None:
        """The background step: sign when the tree grew and the last checkpoint is at least
        ``SIGN_INTERVAL_MS`` old (across every process serving the database)."""
        size = await self.library.storage.log_size()
        latest = self._latest
        if size == 0 or (latest is not None and latest.size >= size):
            return None
        async with self._lock:
            return await self._sign(SIGN_INTERVAL_MS)


def signer_of(library: Library) -> CheckpointSigner:
    signer = library.extras.get("checkpoint_signer")
    if not isinstance(signer, CheckpointSigner):
        signer = library.extras["checkpoint_signer"] = CheckpointSigner(library)
    return signer


async def _run(signer: CheckpointSigner, interval: float) -> None:
    reported = ""
    while True:
        await asyncio.sleep(interval)
        try:
            await signer.tick()
            reported = ""
        except Exception as exc:  # keep signing later: the cause may be transient
            code = exc.code if isinstance(exc, ServiceError) else type(exc).__name__
            if code != reported:  # say it once, not once a second
                _log.warning("not signing checkpoints: %s [%s]", exc, code)
                reported = code


@contextlib.asynccontextmanager
async def background_signer(library: Library, interval: float = 1.0) -> AsyncIterator[None]:
    """Run the once-a-second checkpoint signer for as long as the app runs."""
    task = asyncio.get_running_loop().create_task(_run(signer_of(library), interval))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
