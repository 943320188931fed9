"""Signing the log's checkpoints (PROTOCOL §7): when, with which key, and never inconsistently.

Checkpoint policy.  A checkpoint is signed inside one write transaction, so it is atomic and
serialised with admissions, also across several server processes on one database:

1. read the latest persisted checkpoint and the tree size; a tree smaller than the latest
   checkpoint is corruption (``LOG_TRUNCATED``): sizes only grow, also across restarts; the
   tree must extend the largest checkpoint ever published (``store/log_floor.py``: the
   database's record, and ``LOG_KEY.published``), else ``CATCH_UP_REQUIRED`` or ``LOG_FORKED``;
2. nothing to do when the tree has not grown (or, for the background signer, when the latest
   checkpoint is less than a second old);
3. the log key must hold an admitted authority certificate with role ``log``, valid when the
   last leaf it would cover was admitted and not expired now, and not revoked
   (:func:`check_log_key`, shared with the offline verifier);
4. compute the new root and a consistency proof from the latest checkpoint, and verify that
   proof against the *persisted* old root: the log never signs two inconsistent checkpoints;
5. sign the C2SP note, insert it and record it as the largest published (``log_floor``).

GET ``/api/log/checkpoint`` signs on demand when the tree is larger than the latest checkpoint;
a background task (:func:`background_signer`) signs at most once a second while the log grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from alexandria.core import merkle
from alexandria.core.checkpoint import Checkpoint, sign_checkpoint
from alexandria.core.keys import SigningKey
from alexandria.core.timestamps import format_ms, parse_ms
from alexandria.errors import Failed
from alexandria.reads.log import StoredCheckpoint, latest_checkpoint
from alexandria.rules.authority import LOG_ROLE, LogUnavailable, check_log_key
from alexandria.service.published import Published, PublishedCheckpoint
from alexandria.store import log_floor
from alexandria.store.interface import Storage
from alexandria.store.merkle_nodes import LogCorrupt, node_reader, tree_size

SIGN_INTERVAL_MS = 1000
#: on demand, one process signs at most once in this many seconds: a request that finds the
#: tree larger sooner waits for the next signing and shares it, so clients polling the
#: checkpoint while the log grows never make every request a write transaction
ON_DEMAND_INTERVAL_S = 0.2

_log = logging.getLogger("alexandria.log")


class SigningLibrary(Protocol):
    """What the signer needs of a running library (``service.library.Library``)."""

    storage: Storage
    log_key: SigningKey | None
    published: PublishedCheckpoint | None  # the largest checkpoint served, outside the db

    @property
    def origin_url(self) -> str | None:
        """A mirror's origin: it serves the origin's checkpoints and signs none."""

    @property
    def checkpoints(self) -> CheckpointSigner: ...

    async def log_problem(self, fresh: bool = False) -> Failed | None:
        """Why this node may not extend its log (``CATCH_UP_REQUIRED``, ``LOG_FORKED``…)."""


def _due(latest: StoredCheckpoint, size: int, now: int, min_interval_ms: int) -> bool:
    """Whether a tree of ``size`` needs a checkpoint after ``latest``: it grew, and ``latest``
    is at least ``min_interval_ms`` old."""
    return size > latest.size and now - (parse_ms(latest.signed_at) or 0) >= min_interval_ms


def sign_checkpoint_now(
    conn: sqlite3.Connection, storage: Storage, key: SigningKey | None,
    min_interval_ms: int = 0, published: Published | None = None,
) -> StoredCheckpoint:
    """Steps 1–5 of the module docstring, inside the caller's write transaction;
    ``published``: the largest checkpoint served (``service/published.py``), which the tree
    must extend."""
    now = storage.clock()
    # 1.
    latest = latest_checkpoint(conn)
    size = tree_size(conn)
    if latest is not None and size < latest.size:
        raise LogCorrupt(
            f"the log holds {size} leaves but checkpoint {latest.size} was signed",
            "LOG_TRUNCATED", tree_size=size, checkpoint_size=latest.size,
        )
    floors = log_floor.read_floor(conn)
    if published is not None:
        floors.append(published)
    problem = log_floor.log_problem(conn, floors, size)
    if problem is not None:  # 1b. never fork the log, nor sign under what was published
        raise problem
    # 2.
    if latest is not None and not _due(latest, size, now, min_interval_ms):
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
    view = storage.state_view(conn)
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
    # every node and every later restore of this database knows it was published
    log_floor.raise_floor(conn, note)
    return signed


class CheckpointSigner:
    """One library's checkpoint signer; concurrent requests share one signing."""

    def __init__(self, library: SigningLibrary) -> None:
        self.library = library
        self._latest: StoredCheckpoint | None = None
        self._lock = asyncio.Lock()
        self._last_signing = float("-inf")  # time.monotonic() when the last signing ended
        #: called with each checkpoint this signer stores (the witnesses' tasks wake on it)
        self.listeners: list[Callable[[StoredCheckpoint], None]] = []

    async def _sign(self, min_interval_ms: int) -> StoredCheckpoint:
        storage, key = self.library.storage, self.library.log_key
        keeper = self.library.published
        published = keeper.load() if keeper is not None else None
        # a checkpoint changes nothing the writers remember: the writer admitting meanwhile
        # (in this process, in another, on another node) keeps its memory
        try:
            signed = await storage.write(
                lambda conn: sign_checkpoint_now(conn, storage, key, min_interval_ms, published),
                keeps_memory=True,
            )
        finally:
            self._last_signing = time.monotonic()
        if keeper is not None and (published is None or signed.size > published.size):
            # remembered before it is served: a restore can never sign under it
            await asyncio.to_thread(keeper.record, signed.size, signed.note)
        self._learn(signed)
        return signed

    def _learn(self, stored: StoredCheckpoint) -> None:
        """Remember ``stored`` if it is the largest checkpoint seen, and tell the listeners."""
        if self._latest is None or stored.size > self._latest.size:
            self._latest = stored
            for listener in self.listeners:
                listener(stored)

    async def current(self) -> StoredCheckpoint:
        """A checkpoint of the whole tree as it is now, signed on demand if needed (on a
        mirror: the latest of its origin's checkpoints it verified)."""
        if self.library.origin_url is not None:
            return await self._mirrored()
        size = await self.library.storage.log_size()
        covering = await self._covering(size)
        if covering is not None:
            return covering
        async with self._lock:
            covering = await self._covering(size)
            if covering is not None:
                return covering
            wait = self._last_signing + ON_DEMAND_INTERVAL_S - time.monotonic()
            if wait > 0:  # the requests arriving meanwhile queue on the lock, then share it
                await asyncio.sleep(wait)
            return await self._sign(0)

    async def _covering(self, size: int) -> StoredCheckpoint | None:
        """The latest checkpoint this signer knows if it covers a tree of ``size`` and may be
        served as it is.  Not while the log may not be extended: a restored database behind
        what was published holds checkpoints of its own, which ``tick`` learns; the signing
        transaction then says why (``CATCH_UP_REQUIRED``, ``LOG_TRUNCATED``…)."""
        latest = self._latest
        if latest is None or latest.size < size or await self.library.log_problem() is not None:
            return None
        return latest

    async def _mirrored(self) -> StoredCheckpoint:
        latest = await self.library.storage.read(latest_checkpoint)
        if latest is None:
            raise LogUnavailable(
                f"this mirror has not verified a checkpoint of {self.library.origin_url} yet",
                "MIRROR_NO_CHECKPOINT", origin=self.library.origin_url,
            )
        return latest

    async def tick(self) -> StoredCheckpoint | None:
        """The background step: sign when the tree grew and the last checkpoint is at least
        ``SIGN_INTERVAL_MS`` old (across every process serving the database).  Returns the
        checkpoint signed, or the latest one when none was due; None when the log did not
        grow since the latest this signer knows."""
        if self.library.origin_url is not None:
            return None
        storage = self.library.storage
        size = await storage.log_size()
        latest = self._latest
        if size == 0 or (latest is not None and latest.size >= size):
            return None
        # another process serving the database may have signed meanwhile: a read tells, and
        # only a checkpoint that is due takes the write lock (on PostgreSQL every write
        # transaction makes every other node's writer forget what it remembers)
        stored = await storage.read(latest_checkpoint)
        if stored is not None and not _due(stored, size, storage.clock(), SIGN_INTERVAL_MS):
            self._learn(stored)
            return stored
        async with self._lock:
            return await self._sign(SIGN_INTERVAL_MS)


async def _run(signer: CheckpointSigner, interval: float) -> None:
    reported = ""
    while True:
        await asyncio.sleep(interval)
        try:
            await signer.tick()
            reported = ""
        except Exception as exc:  # keep signing later: the cause may be transient
            code = exc.code if isinstance(exc, Failed) else type(exc).__name__
            if code != reported:  # say it once, not once a second
                _log.warning("not signing checkpoints: %s [%s]", exc, code)
                reported = code


@contextlib.asynccontextmanager
async def background_signer(library: SigningLibrary, interval: float = 1.0) -> AsyncIterator[None]:
    """Run the once-a-second checkpoint signer for as long as the app runs."""
    task = asyncio.get_running_loop().create_task(_run(library.checkpoints, interval))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
